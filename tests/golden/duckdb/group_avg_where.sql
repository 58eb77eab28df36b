-- title: GROUP BY with AVG and WHERE
-- policy: demo
SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education;
SELECT _g0, SUM(CASE WHEN _v0 < -500000 THEN -500000 WHEN _v0 > 500000 THEN 500000 ELSE _v0 END) AS _v0, SUM(LEAST(_v1, 1)) AS _v1 FROM (SELECT education AS _g0, SUM(2 * CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END AS DECIMAL(18, 6)) - 500000) AS _v0, COUNT(income) AS _v1, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASH(person_id, education, $salt)) AS _rank FROM people WHERE NOT person_id IS NULL AND (age > 30) AND education IN ('none', 'high_school', 'bachelor', 'master', 'phd') GROUP BY person_id, education) AS _per_unit WHERE _rank <= 1 GROUP BY _g0
