-- title: INTERSECT
-- expect: set operations
SELECT COUNT(*) FROM people INTERSECT SELECT COUNT(*) FROM people
