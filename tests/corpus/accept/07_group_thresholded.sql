-- title: Group by a key without a domain (thresholded partition selection)
SELECT city, COUNT(*) FROM people GROUP BY city
