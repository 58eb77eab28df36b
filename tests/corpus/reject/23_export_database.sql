-- title: EXPORT DATABASE (a DuckDB command, not PostgreSQL)
-- expect: EXPORT is not allowed
EXPORT DATABASE 'dump_dir'
