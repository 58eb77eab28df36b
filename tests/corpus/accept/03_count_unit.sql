-- title: Count rows by their privacy unit column
SELECT COUNT(person_id) AS rows_with_id FROM people
