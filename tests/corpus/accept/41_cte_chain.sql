-- title: A chain of row-level CTEs, each reading the one before
WITH adults AS (SELECT * FROM people WHERE age >= 18),
     californians AS (SELECT person_id, income AS pay FROM adults WHERE state = 'CA')
SELECT COUNT(*), AVG(pay) FROM californians
