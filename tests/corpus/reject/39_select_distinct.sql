-- title: SELECT DISTINCT
-- expect: SELECT DISTINCT without aggregates is not allowed
SELECT DISTINCT state FROM people
