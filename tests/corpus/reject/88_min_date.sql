-- title: MIN of a DATE column: quantiles are DP estimates of numbers; the refusal shows the numeric form
-- expect: quantiles are released for numeric expressions only
SELECT MIN(born) FROM people
