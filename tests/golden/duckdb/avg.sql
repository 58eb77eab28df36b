-- title: AVG as a centered sum over a count
-- policy: demo
SELECT AVG(income) FROM people;
SELECT SUM(CASE WHEN _v0 < -500000 THEN -500000 WHEN _v0 > 500000 THEN 500000 ELSE _v0 END) AS _v0, SUM(LEAST(_v1, 1)) AS _v1 FROM (SELECT SUM(2 * CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END AS DECIMAL(18, 6)) - 500000) AS _v0, COUNT(income) AS _v1 FROM people WHERE NOT person_id IS NULL GROUP BY person_id) AS _per_unit
