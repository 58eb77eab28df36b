-- title: undeclared domain: unit count for partition selection
-- policy: demo
SELECT visit_date, COUNT(*) FROM visits WHERE visit_date >= DATE '2024-01-01' GROUP BY visit_date;
SELECT CAST(_g0 AS TEXT) AS _k0, SUM(LEAST(_v0, 5)) AS _v0, COUNT(*) AS _units FROM (SELECT visit_date AS _g0, COUNT(*) AS _v0, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASH(person_id, visit_date, $salt)) AS _rank FROM visits WHERE NOT person_id IS NULL AND (visit_date >= CAST('2024-01-01' AS DATE)) GROUP BY person_id, visit_date) AS _per_unit WHERE _rank <= 2 GROUP BY _g0
