-- title: HAVING in a per-unit subquery
-- expect: HAVING in a per-unit subquery is not allowed
SELECT AVG(t.n) FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id HAVING COUNT(*) > 2) AS t
