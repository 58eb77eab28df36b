-- title: A derived table in FROM
SELECT COUNT(*) FROM (SELECT * FROM people WHERE age > 30) AS t
