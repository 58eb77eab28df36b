-- title: Date column against DATE literals
SELECT COUNT(*) FROM people WHERE visit_date >= DATE '2023-01-01' AND visit_date < DATE '2024-01-01'
