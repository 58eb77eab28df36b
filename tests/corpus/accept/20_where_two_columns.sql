-- title: Two columns of the same type compared
SELECT COUNT(*) FROM people WHERE age < household
