-- title: integer column with whole bounds sums as integers
-- policy: demo
SELECT SUM(age), AVG(age) FROM people WHERE sex = 'F' OR income IS NULL;
SELECT SUM(CAST(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 120 THEN 120 ELSE _v0 END AS DECIMAL(38, 0))) AS _v0, SUM(CAST(CASE WHEN _v1 < -120 THEN -120 WHEN _v1 > 120 THEN 120 ELSE _v1 END AS DECIMAL(38, 0))) AS _v1, SUM(LEAST(_v2, 1)) AS _v2 FROM (SELECT SUM(CASE WHEN age < 0 THEN 0 WHEN age > 120 THEN 120 ELSE age END) AS _v0, CAST(2 AS DECIMAL(38, 0)) * SUM(CASE WHEN age < 0 THEN 0 WHEN age > 120 THEN 120 ELSE age END) - CAST(120 AS DECIMAL(38, 0)) * COUNT(age) AS _v1, COUNT(age) AS _v2 FROM people WHERE NOT person_id IS NULL AND (sex = 'F' OR income IS NULL) GROUP BY person_id) AS _per_unit
