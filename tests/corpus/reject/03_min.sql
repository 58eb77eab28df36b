-- title: MIN can be set by one person
-- expect: MIN() is not allowed
SELECT MIN(age) FROM people
