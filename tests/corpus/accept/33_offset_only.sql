-- title: OFFSET without LIMIT
SELECT household, COUNT(*) FROM people GROUP BY household ORDER BY household OFFSET 2
