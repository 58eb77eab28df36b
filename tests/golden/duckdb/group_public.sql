-- title: GROUP BY a public domain: domain filter, group choice among 8 groups
-- policy: demo
SELECT state, COUNT(*) AS n FROM people GROUP BY state;
SELECT CAST(_g0 AS TEXT) AS _k0, COUNT(*) AS _v0 FROM (SELECT ARG_MIN(state, HASH(person_id, state, $salt)) AS _g0 FROM people WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') GROUP BY person_id) AS _per_unit GROUP BY _g0
