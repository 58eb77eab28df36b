-- title: A decimal literal whose scale overflows DECIMAL(38) against an integer column
-- expect: numeric literal
SELECT COUNT(*) FROM people WHERE person_id = 42 AND age = 0.0000000000000000000000000000000000001
