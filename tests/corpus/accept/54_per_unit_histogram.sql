-- title: GROUP BY an aggregate of a per-unit subquery: how many people have n visits
SELECT t.n, COUNT(*)
FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) AS t
GROUP BY t.n
ORDER BY t.n
