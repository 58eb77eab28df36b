-- title: Numeric comparisons combined with AND/OR/NOT
SELECT COUNT(*) FROM people WHERE age >= 18 AND NOT (income < 1000 OR age > 65)
