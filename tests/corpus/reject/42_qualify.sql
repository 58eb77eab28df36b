-- title: QUALIFY
-- expect: syntax error at or near "QUALIFY"
SELECT state, COUNT(*) FROM people GROUP BY state QUALIFY COUNT(*) > 10
