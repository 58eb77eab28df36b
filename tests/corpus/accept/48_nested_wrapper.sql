-- title: Wrappers nested: a filter, then an order and a limit
SELECT *
FROM (SELECT k, n FROM (SELECT household AS k, COUNT(*) AS n FROM people GROUP BY household) AS q WHERE n > 10) AS w
ORDER BY n DESC
LIMIT 3
