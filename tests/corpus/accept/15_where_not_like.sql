-- title: NOT LIKE with a pattern containing _
SELECT COUNT(*) FROM people WHERE city NOT LIKE '_a%'
