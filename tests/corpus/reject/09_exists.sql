-- title: EXISTS
-- expect: subqueries is not allowed
SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM people WHERE age > 100)
