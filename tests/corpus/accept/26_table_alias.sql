-- title: Table alias and qualified columns
SELECT p.state, COUNT(p.income) AS n FROM people AS p WHERE p.age > 21 GROUP BY p.state ORDER BY p.state
