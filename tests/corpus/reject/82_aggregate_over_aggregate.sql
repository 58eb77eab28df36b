-- title: An aggregate over another aggregate's released rows
-- expect: an aggregate subquery grouped by another column is not allowed
SELECT COUNT(*) FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS t
