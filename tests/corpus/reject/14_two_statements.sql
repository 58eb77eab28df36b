-- title: Two statements in one call
-- expect: several statements
SELECT COUNT(*) FROM people; SELECT COUNT(*) FROM people WHERE age > 50
