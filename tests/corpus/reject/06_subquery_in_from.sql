-- title: A derived table in FROM
-- expect: subqueries is not allowed
SELECT COUNT(*) FROM (SELECT * FROM people WHERE age > 30) AS t
