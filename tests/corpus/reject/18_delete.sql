-- title: DELETE
-- expect: DELETE is not allowed
DELETE FROM people WHERE age > 90
