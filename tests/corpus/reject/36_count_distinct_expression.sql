-- title: COUNT(DISTINCT <expression>)
-- expect: COUNT(DISTINCT <expression>) is not allowed
SELECT COUNT(DISTINCT age + 1) FROM people
