-- title: EXPORT DATABASE (refused as unparseable)
-- expect: syntax error
EXPORT DATABASE 'dump_dir'
