-- title: SUM of a column without declared bounds
-- expect: SUM(household) is not allowed
SELECT SUM(household) FROM people
