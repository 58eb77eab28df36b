-- title: A common table expression
-- expect: WITH (common table expressions)
WITH adults AS (SELECT * FROM people WHERE age >= 18)
SELECT COUNT(*) FROM adults
