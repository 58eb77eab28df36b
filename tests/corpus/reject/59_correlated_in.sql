-- title: A correlated IN subquery
-- expect: a correlated IN subquery is not allowed
SELECT COUNT(*) FROM visits v WHERE v.person_id IN (SELECT p.person_id FROM people p WHERE p.age > v.ward)
