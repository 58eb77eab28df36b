-- title: Group by two keys, several aggregates
SELECT state, household, COUNT(*) AS n, AVG(income) AS mean_income
FROM people
GROUP BY state, household
