-- title: Count every row
SELECT COUNT(*) FROM people;
