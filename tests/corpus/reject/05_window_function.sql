-- title: Window functions over rows compute on true values (over an aggregate's released rows they are post-processing)
-- expect: window functions over rows
SELECT state, COUNT(*) OVER (PARTITION BY state) FROM people
