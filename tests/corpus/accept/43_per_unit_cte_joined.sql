-- title: A per-unit CTE joined on the unit to another protected table
WITH spending AS (SELECT person_id AS pid, SUM(cost) AS spent, MAX(cost) AS top FROM visits GROUP BY person_id)
SELECT p.state, AVG(s.spent), AVG(s.top)
FROM people p JOIN spending s ON s.pid = p.person_id
GROUP BY p.state
