-- title: Plain EXPLAIN shows row estimates
-- expect: EXPLAIN is not allowed
EXPLAIN SELECT COUNT(*) FROM people WHERE age > 30
