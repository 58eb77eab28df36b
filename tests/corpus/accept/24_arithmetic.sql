-- title: Arithmetic over aggregates and numbers
SELECT SUM(income) / COUNT(*) AS per_person, -(AVG(age) - 40) * 2 AS offset_age FROM people
