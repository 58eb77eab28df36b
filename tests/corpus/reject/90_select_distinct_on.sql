-- title: SELECT DISTINCT ON is refused (plain SELECT DISTINCT over an aggregate's rows is accepted)
-- expect: SELECT DISTINCT ON is not allowed
SELECT DISTINCT ON (state) state, COUNT(*) FROM people GROUP BY state, city
