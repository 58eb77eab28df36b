-- title: MAX of an unbounded column in a per-unit subquery
-- expect: MAX(ward) is not allowed
SELECT AVG(t.m) FROM (SELECT person_id, MAX(ward) AS m FROM visits GROUP BY person_id) AS t
