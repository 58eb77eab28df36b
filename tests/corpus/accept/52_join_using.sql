-- title: JOIN ... USING the unit
SELECT COUNT(*)
FROM people JOIN visits USING (person_id)
WHERE visits.cost > 100 AND people.age < 65
