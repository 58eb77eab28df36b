-- title: The source table of a protected table, queried directly
-- expect: SELECT *
SELECT * FROM staff_raw
