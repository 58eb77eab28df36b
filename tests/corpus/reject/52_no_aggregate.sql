-- title: A query without aggregates
-- expect: a query without aggregates
SELECT state FROM people GROUP BY state
