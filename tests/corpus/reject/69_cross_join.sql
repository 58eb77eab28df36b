-- title: CROSS JOIN pairs every row with every other
-- expect: CROSS JOIN is not allowed
SELECT COUNT(*) FROM people p CROSS JOIN visits v
