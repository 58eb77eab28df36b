-- title: HAVING and ORDER BY over aliases
SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n >= 10 ORDER BY n DESC
