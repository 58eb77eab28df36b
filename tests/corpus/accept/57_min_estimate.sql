-- title: MIN as the DP estimate of the 0 quantile (exponential mechanism over the declared range)
SELECT MIN(age) FROM people
