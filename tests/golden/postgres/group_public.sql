-- title: GROUP BY a public domain: domain filter, group choice among 8 groups
-- policy: demo
SELECT state, COUNT(*) AS n FROM people GROUP BY state;
SELECT CAST(_g0 AS TEXT) AS _k0, COUNT(*) AS _v0 FROM (SELECT DISTINCT ON (person_id) state AS _g0 FROM people WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') ORDER BY person_id, HASHTEXTEXTENDED(CAST(ROW(person_id, state) AS TEXT), %(salt)s)) AS _per_unit GROUP BY _g0
