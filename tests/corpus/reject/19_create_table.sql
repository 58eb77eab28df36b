-- title: CREATE TABLE
-- expect: CREATE is not allowed
CREATE TABLE copy_of_people AS SELECT * FROM people
