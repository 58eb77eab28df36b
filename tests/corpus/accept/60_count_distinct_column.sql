-- title: COUNT(DISTINCT ...) of a column other than the unit: each unit's values bounded first
SELECT COUNT(DISTINCT city) FROM people
