-- title: GROUP BY the privacy unit
-- expect: GROUP BY the privacy unit
SELECT person_id, COUNT(*) FROM people GROUP BY person_id
