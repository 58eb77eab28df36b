-- title: The protected table named by the schema the engine reads it from (DuckDB: main)
SELECT COUNT(*) FROM main.people
