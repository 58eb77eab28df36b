-- title: undeclared domain: unit count for partition selection
-- policy: demo
SELECT visit_date, COUNT(*) FROM visits WHERE visit_date >= DATE '2024-01-01' GROUP BY visit_date;
SELECT CAST(_g0 AS TEXT) AS _k0, SUM(LEAST(_v0, 5)) AS _v0, COUNT(*) AS _units FROM (SELECT visit_date AS _g0, COUNT(*) FILTER(WHERE (visit_date >= CAST('2024-01-01' AS DATE))) AS _v0, COUNT(*) FILTER(WHERE (visit_date >= CAST('2024-01-01' AS DATE))) AS _hits, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY CASE WHEN COUNT(*) FILTER(WHERE (visit_date >= CAST('2024-01-01' AS DATE))) > 0 THEN 0 ELSE 1 END, HASHTEXTEXTENDED(CAST(ROW(person_id, visit_date) AS TEXT), %(salt)s)) AS _rank FROM visits WHERE NOT person_id IS NULL GROUP BY person_id, visit_date) AS _per_unit WHERE _rank <= 2 AND _hits > 0 GROUP BY _g0
