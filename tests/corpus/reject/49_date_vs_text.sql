-- title: A date column compared with a string
-- expect: comparing date with text
SELECT COUNT(*) FROM people WHERE visit_date > '2020-01-01'
