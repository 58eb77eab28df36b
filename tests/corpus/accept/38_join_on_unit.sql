-- title: Two protected tables joined on the privacy unit, keys from both
SELECT v.kind, COUNT(*), AVG(v.cost) AS avg_cost
FROM visits v JOIN people p ON v.person_id = p.person_id
WHERE p.age > 40
GROUP BY v.kind
