-- title: Column names given after a subquery's alias
SELECT AVG(t.n)
FROM (SELECT person_id, COUNT(*) FROM visits GROUP BY person_id) AS t(pid, n)
