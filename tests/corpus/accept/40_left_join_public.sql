-- title: LEFT JOIN keeps every protected row; the public key can be NULL
SELECT r.region, COUNT(*)
FROM people AS p LEFT JOIN regions AS r ON r.state = p.city
GROUP BY r.region
