-- title: CAST can fail on some rows
-- expect: CAST is not allowed
SELECT COUNT(*) FROM people WHERE CAST(city AS INTEGER) > 3
