-- title: A text column compared with a number
-- expect: comparing text with num
SELECT COUNT(*) FROM people WHERE city = 42
