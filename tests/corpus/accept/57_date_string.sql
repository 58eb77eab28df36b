-- title: A date column compared with a date written as a string (read as DATE '2020-01-01')
SELECT COUNT(*) FROM people WHERE visit_date > '2020-01-01'
