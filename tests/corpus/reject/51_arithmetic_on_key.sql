-- title: Arithmetic on a group key
-- expect: arithmetic on a GROUP BY column
SELECT household, COUNT(*) * household FROM people GROUP BY household
