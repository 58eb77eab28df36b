-- title: A CTE inside a BI tool's wrapper
SELECT * FROM (WITH adults AS (SELECT * FROM people WHERE age >= 18)
               SELECT state, SUM(income) AS total FROM adults GROUP BY state) AS virtual_table
LIMIT 1000
