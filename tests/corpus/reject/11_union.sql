-- title: UNION
-- expect: set operations
SELECT COUNT(*) FROM people WHERE age < 30
UNION
SELECT COUNT(*) FROM people WHERE age >= 30
