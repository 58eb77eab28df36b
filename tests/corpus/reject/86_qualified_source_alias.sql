-- title: A schema-qualified name is the engine's table: staff is read from staff_raw
-- expect: the qualified table name main.staff is not allowed
SELECT COUNT(*) FROM main.staff
