-- title: MIN in HAVING
-- expect: MIN() is not allowed
SELECT state, COUNT(*) FROM people GROUP BY state HAVING MIN(age) < 18
