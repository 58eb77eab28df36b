-- title: Arithmetic in WHERE can overflow on some rows
-- expect: arithmetic (add) in WHERE
SELECT COUNT(*) FROM people WHERE age + 1 > 30
