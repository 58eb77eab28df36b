-- title: LIKE with ESCAPE
-- expect: LIKE ... ESCAPE
SELECT COUNT(*) FROM people WHERE city LIKE 'a!%%' ESCAPE '!'
