-- title: Date BETWEEN
SELECT state, COUNT(*) FROM people WHERE visit_date BETWEEN DATE '2022-06-01' AND DATE '2022-08-31' GROUP BY state
