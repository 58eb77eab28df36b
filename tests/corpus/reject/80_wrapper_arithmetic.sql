-- title: Arithmetic in a wrapper
-- expect: arithmetic in an outer query is not allowed
SELECT n + 1 FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS t
