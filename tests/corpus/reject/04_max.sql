-- title: MAX can be set by one person
-- expect: MAX() is not allowed
SELECT state, MAX(income) FROM people GROUP BY state
