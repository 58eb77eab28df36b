-- title: TRY_CAST
-- expect: CAST is not allowed
SELECT COUNT(*) FROM people WHERE TRY_CAST(city AS INTEGER) > 3
