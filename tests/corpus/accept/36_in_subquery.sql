-- title: IN (SELECT ...)
SELECT COUNT(*) FROM people WHERE person_id IN (SELECT person_id FROM people WHERE age > 90)
