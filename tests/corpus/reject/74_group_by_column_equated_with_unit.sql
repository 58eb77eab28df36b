-- title: GROUP BY a column the join equates with the unit
-- expect: GROUP BY the privacy unit is not allowed
SELECT v.visit_id, COUNT(*) FROM people p JOIN visits v ON p.person_id = v.person_id AND p.person_id = v.visit_id GROUP BY v.visit_id
