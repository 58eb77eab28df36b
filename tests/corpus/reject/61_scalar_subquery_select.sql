-- title: A scalar subquery in SELECT
-- expect: a scalar subquery in SELECT is not allowed
SELECT state, (SELECT COUNT(*) FROM visits) FROM people GROUP BY state
