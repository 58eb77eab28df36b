-- title: Count the non-NULL values of a column
SELECT COUNT(income) FROM people
