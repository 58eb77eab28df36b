-- title: Group by a key with a public value domain
SELECT state, COUNT(*) AS n FROM people GROUP BY state
