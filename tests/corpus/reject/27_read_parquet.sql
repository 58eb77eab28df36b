-- title: A parquet reader table function
-- expect: a table function or file reader
SELECT * FROM read_parquet('people.parquet')
