-- title: GROUP BY and ORDER BY by position
SELECT state, SUM(age) FROM people GROUP BY 1 ORDER BY 1
