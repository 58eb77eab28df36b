-- title: A set operation inside a FROM subquery
-- expect: set operations
SELECT COUNT(*) FROM (SELECT person_id FROM people UNION SELECT person_id FROM visits) AS t
