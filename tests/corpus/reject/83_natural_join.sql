-- title: NATURAL JOIN joins on every column name the two tables share
-- expect: NATURAL JOIN is not allowed
SELECT COUNT(*) FROM people p NATURAL JOIN visits v
