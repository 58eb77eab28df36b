-- title: MAX as the DP estimate of the 1 quantile, per group
SELECT state, MAX(income) FROM people GROUP BY state
