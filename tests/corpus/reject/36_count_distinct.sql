-- title: COUNT(DISTINCT ...)
-- expect: COUNT(DISTINCT ...)
SELECT COUNT(DISTINCT city) FROM people
