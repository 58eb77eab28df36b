-- title: SUM with a WHERE clause
-- policy: demo
SELECT SUM(income) FROM people WHERE age BETWEEN 30 AND 40 AND state IN ('CA', 'NY');
SELECT SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 500000 THEN 500000 ELSE _v0 END) AS _v0 FROM (SELECT SUM(CAST(CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END AS DECIMAL(18, 6))) AS _v0 FROM people WHERE NOT person_id IS NULL AND (age BETWEEN 30 AND 40 AND state IN ('CA', 'NY')) GROUP BY person_id) AS _per_unit
