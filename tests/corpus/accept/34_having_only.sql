-- title: HAVING without GROUP BY
SELECT COUNT(*) AS n FROM people HAVING n > 0
