-- title: Columns qualified by the table name
SELECT people.household, COUNT(*) FROM people WHERE people.city IS NOT NULL GROUP BY people.household
