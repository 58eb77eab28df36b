-- title: A comma join, its condition in WHERE
-- expect: a join without ON (a cross join) is not allowed
SELECT COUNT(*) FROM people p, visits v WHERE p.person_id = v.person_id
