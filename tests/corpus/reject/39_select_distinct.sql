-- title: SELECT DISTINCT
-- expect: SELECT DISTINCT is not allowed
SELECT DISTINCT state FROM people
