-- title: LATERAL runs a subquery once per row
-- expect: LATERAL is not allowed
SELECT COUNT(*) FROM people p JOIN LATERAL (SELECT * FROM visits v WHERE v.person_id = p.person_id) AS x ON TRUE
