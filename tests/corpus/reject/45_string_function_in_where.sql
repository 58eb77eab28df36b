-- title: A string function in WHERE
-- expect: the function LOWER() in WHERE
SELECT COUNT(*) FROM people WHERE lower(city) = 'springfield'
