-- title: A table of another schema that shares the protected table's name is neither it nor public
-- expect: the qualified table name other.people is not allowed
SELECT COUNT(*) FROM other.people
