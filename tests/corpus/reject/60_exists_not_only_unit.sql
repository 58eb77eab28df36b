-- title: EXISTS correlated on more than the unit
-- expect: this EXISTS subquery is not allowed: it must be correlated by exactly one equality
SELECT COUNT(*) FROM people p WHERE EXISTS (SELECT 1 FROM visits v WHERE v.person_id = p.person_id AND v.ward = p.household)
