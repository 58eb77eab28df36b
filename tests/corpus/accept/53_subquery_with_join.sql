-- title: A row-level subquery with a join of its own, first in FROM
SELECT t.kind, COUNT(*)
FROM (SELECT p.age, v.kind FROM people p JOIN visits v ON p.person_id = v.person_id WHERE p.age > 30) AS t
GROUP BY t.kind
