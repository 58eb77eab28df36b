-- title: DuckDB's catalog.schema.table (the attached database's name), joined to a plain name
SELECT r.region, COUNT(*) AS n FROM people.main.people p JOIN main.regions r ON p.state = r.state GROUP BY r.region
