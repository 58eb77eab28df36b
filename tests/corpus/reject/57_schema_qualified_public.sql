-- title: A public table's name in another schema could name a copy of protected data
-- expect: a schema-qualified table name is not allowed
SELECT COUNT(*) FROM other_schema.regions
