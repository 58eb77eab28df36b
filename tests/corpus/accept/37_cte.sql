-- title: A common table expression
WITH adults AS (SELECT * FROM people WHERE age >= 18)
SELECT COUNT(*) FROM adults
