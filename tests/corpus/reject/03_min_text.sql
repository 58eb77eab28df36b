-- title: MIN of a text column has no numeric range to estimate over
-- expect: quantiles are released for numeric expressions only
SELECT MIN(state) FROM people
