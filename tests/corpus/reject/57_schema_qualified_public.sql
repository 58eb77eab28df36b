-- title: A public table's name in another schema could name a copy of protected data
-- expect: the qualified table name other_schema.regions is not allowed
SELECT COUNT(*) FROM other_schema.regions
