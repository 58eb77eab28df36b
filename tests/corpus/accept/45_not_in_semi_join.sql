-- title: NOT IN (SELECT unit ...): the people without a costly visit
SELECT COUNT(*), AVG(age)
FROM people
WHERE person_id NOT IN (SELECT person_id FROM visits WHERE cost > 500)
