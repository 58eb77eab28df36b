-- title: Aliases without AS
SELECT state st, COUNT(*) n FROM people p GROUP BY state ORDER BY n
