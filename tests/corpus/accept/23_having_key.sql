-- title: HAVING on a group key and BETWEEN on an aggregate
SELECT state AS s, AVG(income) AS avg_income FROM people
GROUP BY state
HAVING s <> 'TX' AND avg_income BETWEEN 1000 AND 90000
