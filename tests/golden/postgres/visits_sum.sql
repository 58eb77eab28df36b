-- title: several rows and groups per unit
-- policy: demo
SELECT state, SUM(cost) FROM visits GROUP BY state;
SELECT _g0, SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 10000000000 THEN 10000000000 ELSE _v0 END) AS _v0 FROM (SELECT state AS _g0, SUM(CASE WHEN _s0 < 0 THEN 0 WHEN _s0 > 2000000000 THEN 2000000000 ELSE _s0 END) AS _v0, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASHTEXTEXTENDED(CAST(ROW(person_id, state) AS TEXT), %(salt)s)) AS _rank FROM (SELECT person_id, state, cost, CAST(CASE WHEN cost < 0 THEN 0 WHEN cost > 2000 THEN 2000 ELSE cost END * 1000000 AS BIGINT) AS _s0 FROM visits WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') OFFSET 0) AS _rows GROUP BY person_id, state) AS _per_unit WHERE _rank <= 2 GROUP BY _g0
