-- title: Average of a bounded column
SELECT AVG(age) FROM people
