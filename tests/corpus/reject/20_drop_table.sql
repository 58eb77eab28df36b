-- title: DROP TABLE
-- expect: DROP is not allowed
DROP TABLE people
