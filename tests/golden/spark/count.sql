-- title: COUNT(*) over a bounded table
-- policy: demo
SELECT COUNT(*) FROM people;
SELECT COUNT(DISTINCT person_id) AS _v0 FROM people WHERE NOT person_id IS NULL
