-- title: Window functions compute on true values
-- expect: window functions (OVER)
SELECT state, COUNT(*) OVER (PARTITION BY state) FROM people GROUP BY state
