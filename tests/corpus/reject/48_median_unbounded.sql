-- title: MEDIAN of a column without bounds
-- expect: MEDIAN(person_id) is not allowed
SELECT MEDIAN(person_id) FROM people
