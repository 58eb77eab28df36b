-- title: PRIMARY KEY: rows clipped only, no per-unit level
-- policy: demo
SELECT state, SUM(income), COUNT(*) FROM people_pk GROUP BY state;
SELECT state AS _g0, SUM(CASE WHEN CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END * 1000000 AS BIGINT) < 0 THEN 0 WHEN CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END * 1000000 AS BIGINT) > 500000000000 THEN 500000000000 ELSE CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END * 1000000 AS BIGINT) END) AS _v0, COUNT(*) AS _v1 FROM people_pk WHERE NOT person_id IS NULL AND state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA') GROUP BY state
