-- title: WITH RECURSIVE
-- expect: WITH RECURSIVE is not allowed
WITH RECURSIVE adults AS (SELECT * FROM people WHERE age >= 18) SELECT COUNT(*) FROM adults
