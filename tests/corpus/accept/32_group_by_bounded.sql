-- title: Group by a bounded numeric column
SELECT age, COUNT(*), SUM(income) FROM people WHERE age BETWEEN 30 AND 39 GROUP BY age ORDER BY age
