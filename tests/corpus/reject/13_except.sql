-- title: EXCEPT
-- expect: set operations
SELECT COUNT(*) FROM people EXCEPT SELECT COUNT(*) FROM people WHERE age > 50
