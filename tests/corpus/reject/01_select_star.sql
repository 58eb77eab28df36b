-- title: SELECT * releases rows
-- expect: SELECT * is not allowed
SELECT * FROM people
