-- title: A file reader table function
-- expect: a table function or file reader
SELECT COUNT(*) FROM read_csv('people.csv')
