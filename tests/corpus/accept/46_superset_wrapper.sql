-- title: Superset's wrapper around a saved query
SELECT state AS state, n AS n
FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS virtual_table
ORDER BY n DESC
LIMIT 1000
