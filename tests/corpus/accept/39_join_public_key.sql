-- title: A public table joined; its column is a key whose domain is the public table's values
SELECT r.region, COUNT(*), SUM(p.income) AS income
FROM people p JOIN regions r ON p.state = r.state
GROUP BY r.region
