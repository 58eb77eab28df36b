-- title: EXISTS not correlated on the privacy unit
-- expect: EXISTS subquery is not allowed: it must be correlated
SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM people WHERE age > 100)
