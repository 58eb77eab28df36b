-- title: error() raises depending on the rows
-- expect: error() is not allowed
SELECT COUNT(*) FROM people WHERE person_id = 42 AND error('found') = 1
