-- title: COUNT(*) over a bounded table
-- policy: demo
SELECT COUNT(*) FROM people;
SELECT SUM(LEAST(_v0, 1)) AS _v0 FROM (SELECT COUNT(*) AS _v0 FROM people WHERE NOT person_id IS NULL GROUP BY person_id) AS _per_unit
