-- title: SUM(DISTINCT x) is not supported yet (only COUNT(DISTINCT col) has the per-person bounded rewrite)
-- expect: SUM(DISTINCT ...) is not allowed
SELECT SUM(DISTINCT age) FROM people
