-- title: PERCENTILE_CONT's fraction must be a literal
-- expect: PERCENTILE_CONT with a non-literal fraction is not allowed
SELECT PERCENTILE_CONT(age) WITHIN GROUP (ORDER BY income) FROM people
