-- title: The protected table through a qualified name
-- expect: a schema-qualified table name is not allowed
SELECT COUNT(*) FROM main.people
