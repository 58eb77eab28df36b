-- title: Regular expressions
-- expect: regular expressions
SELECT COUNT(*) FROM people WHERE regexp_matches(city, '^Spr')
