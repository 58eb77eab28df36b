-- title: A comma join whose WHERE does not equate the tables' columns: a cross join
-- expect: the comma join of 'v' with no equality joining it (a cross join) is not allowed
SELECT COUNT(*) FROM people p, visits v WHERE p.age > 3
