-- title: LIKE and ILIKE with literal patterns
SELECT COUNT(*) FROM people WHERE city LIKE 'San%' OR city ILIKE '%ville'
