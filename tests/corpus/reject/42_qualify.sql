-- title: QUALIFY
-- expect: QUALIFY is not allowed
SELECT state, COUNT(*) FROM people GROUP BY state QUALIFY COUNT(*) > 10
