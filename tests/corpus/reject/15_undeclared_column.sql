-- title: A column the policy does not declare
-- expect: the column 'name' is not allowed
SELECT COUNT(*) FROM people WHERE name = 'Alice'
