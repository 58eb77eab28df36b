-- title: RIGHT JOIN would NULL-extend a protected table
-- expect: RIGHT JOIN is not allowed
SELECT COUNT(*) FROM people p RIGHT JOIN visits v ON p.person_id = v.person_id
