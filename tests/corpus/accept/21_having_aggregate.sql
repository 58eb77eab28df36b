-- title: HAVING over an aggregate
SELECT city, COUNT(*) FROM people GROUP BY city HAVING COUNT(*) > 100
