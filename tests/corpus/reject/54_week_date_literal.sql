-- title: A date literal Python reads but DuckDB does not (membership oracle)
-- expect: date literal
SELECT COUNT(*) FROM people WHERE person_id = 42 AND visit_date > DATE '2020-W01-1'
