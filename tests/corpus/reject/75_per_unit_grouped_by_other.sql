-- title: An aggregate subquery grouped by another column than the unit
-- expect: an aggregate subquery grouped by another column is not allowed
SELECT AVG(t.n) FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS t
