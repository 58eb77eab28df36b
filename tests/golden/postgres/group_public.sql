-- title: GROUP BY a public domain: domain filter, group choice among 8 groups
-- policy: demo
SELECT state, COUNT(*) AS n FROM people GROUP BY state;
SELECT _g0, SUM(LEAST(_v0, 1)) AS _v0 FROM (SELECT state AS _g0, COUNT(*) AS _v0, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASHTEXTEXTENDED(CAST(ROW(person_id, state) AS TEXT), %(salt)s)) AS _rank FROM people WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') GROUP BY person_id, state) AS _per_unit WHERE _rank <= 1 GROUP BY _g0
