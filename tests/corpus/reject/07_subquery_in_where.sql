-- title: A scalar subquery in WHERE
-- expect: a scalar subquery in WHERE is not allowed
SELECT COUNT(*) FROM people WHERE age > (SELECT 40)
