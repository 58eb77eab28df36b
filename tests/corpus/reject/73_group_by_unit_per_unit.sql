-- title: GROUP BY the unit of a per-unit subquery
-- expect: GROUP BY the privacy unit is not allowed
SELECT t.person_id, AVG(t.n) FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) AS t GROUP BY t.person_id
