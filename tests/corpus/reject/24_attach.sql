-- title: ATTACH another database
-- expect: ATTACH is not allowed
ATTACH 'other.duckdb' AS other
