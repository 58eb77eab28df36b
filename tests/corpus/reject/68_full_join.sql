-- title: FULL JOIN would NULL-extend a protected table
-- expect: FULL JOIN is not allowed
SELECT COUNT(*) FROM people p FULL JOIN visits v ON p.person_id = v.person_id
