-- title: Sum of a bounded column
SELECT SUM(income) AS total_income FROM people
