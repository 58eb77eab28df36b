-- title: ORDER BY an aggregate expression, NULLS LAST, LIMIT/OFFSET
SELECT household, SUM(income) AS total FROM people GROUP BY household
ORDER BY total / 1000 DESC NULLS LAST, household ASC LIMIT 3 OFFSET 1
