-- title: A scalar subquery in WHERE
-- expect: subqueries is not allowed
SELECT COUNT(*) FROM people WHERE age > (SELECT 40)
