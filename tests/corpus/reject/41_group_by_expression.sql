-- title: GROUP BY a function not admitted in expressions
-- expect: LENGTH in an expression is not allowed
SELECT COUNT(*) FROM people GROUP BY LENGTH(city)
