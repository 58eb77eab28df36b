-- title: EXISTS correlated on the privacy unit (a semi-join)
SELECT state, COUNT(*)
FROM people p
WHERE EXISTS (SELECT 1 FROM visits v WHERE v.person_id = p.person_id AND v.kind = 'lab')
GROUP BY state
