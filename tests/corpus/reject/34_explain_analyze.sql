-- title: EXPLAIN ANALYZE shows timings and row counts
-- expect: EXPLAIN ANALYZE is not allowed
EXPLAIN ANALYZE SELECT COUNT(*) FROM people WHERE age > 30
