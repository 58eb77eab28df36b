-- title: A self-join
-- expect: JOIN is not allowed
SELECT COUNT(*) FROM people AS a JOIN people AS b ON a.household = b.household
