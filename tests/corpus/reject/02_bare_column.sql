-- title: A column neither grouped nor aggregated
-- expect: the bare column 'state' in SELECT
SELECT state, COUNT(*) FROM people
