-- title: SELECT DISTINCT over an aggregate query's released rows (post-processing)
SELECT DISTINCT state, COUNT(*) FROM people GROUP BY state, city
