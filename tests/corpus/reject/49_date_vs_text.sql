-- title: A date column compared with a string that is not a date
-- expect: comparing a DATE column with a string that is not a date
SELECT COUNT(*) FROM people WHERE visit_date > '2020-13-01'
