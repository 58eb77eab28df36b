-- title: Arithmetic on a date column is not folded (only a DATE literal's)
-- expect: the date arithmetic visited + INTERVAL
SELECT COUNT(*) FROM visits WHERE visited + INTERVAL '1' DAY < DATE '2024-01-01'
