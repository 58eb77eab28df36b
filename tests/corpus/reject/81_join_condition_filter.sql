-- title: A filter in a LEFT JOIN's ON
-- expect: this LEFT JOIN condition is not allowed
SELECT COUNT(*) FROM people p LEFT JOIN visits v ON p.person_id = v.person_id AND v.cost > 100
