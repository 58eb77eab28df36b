-- title: MIN (a DP estimate) in HAVING
SELECT state, COUNT(*) FROM people GROUP BY state HAVING MIN(age) < 18
