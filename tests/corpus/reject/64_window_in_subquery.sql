-- title: A window function inside a FROM subquery
-- expect: window functions (OVER)
SELECT COUNT(*) FROM (SELECT person_id, ROW_NUMBER() OVER () AS r FROM people) AS t WHERE t.r < 10
