-- title: A syntax error
-- expect: syntax error
SELECT COUNT(*) FROM people WHERE age >
