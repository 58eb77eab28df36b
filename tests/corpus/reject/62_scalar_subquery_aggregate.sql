-- title: A scalar subquery computing an aggregate, in WHERE
-- expect: a scalar subquery in WHERE is not allowed
SELECT COUNT(*) FROM people WHERE age > (SELECT AVG(age) FROM people)
