-- title: GROUP BY an expression
-- expect: GROUP BY an expression
SELECT COUNT(*) FROM people GROUP BY age / 10
