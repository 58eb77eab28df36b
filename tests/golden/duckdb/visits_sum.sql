-- title: several rows and groups per unit
-- policy: demo
SELECT state, SUM(cost) FROM visits GROUP BY state;
SELECT _g0, SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 10000 THEN 10000 ELSE _v0 END) AS _v0 FROM (SELECT state AS _g0, SUM(CAST(CASE WHEN cost < 0 THEN 0 WHEN cost > 2000 THEN 2000 ELSE cost END AS DECIMAL(18, 6))) AS _v0, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASH(person_id, state, $salt)) AS _rank FROM visits WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') GROUP BY person_id, state) AS _per_unit WHERE _rank <= 2 GROUP BY _g0
