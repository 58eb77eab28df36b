-- title: IN (SELECT unit ...) over a join, on a joined query
SELECT v.kind, COUNT(*)
FROM visits v JOIN people p ON p.person_id = v.person_id
WHERE p.person_id IN (SELECT s.person_id FROM visits s JOIN people q ON q.person_id = s.person_id WHERE q.age > 60)
GROUP BY v.kind
