-- title: A per-unit subquery: the average number of costly visits per person
SELECT AVG(t.n) AS visits_per_person, COUNT(*)
FROM (SELECT person_id, COUNT(*) AS n FROM visits WHERE cost > 100 GROUP BY person_id) AS t
