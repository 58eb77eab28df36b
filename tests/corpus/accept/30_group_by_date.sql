-- title: Group by a date column
SELECT visit_date, COUNT(*) FROM people GROUP BY visit_date ORDER BY visit_date NULLS FIRST LIMIT 10
