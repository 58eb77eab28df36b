-- title: IN with signed and decimal numbers
SELECT COUNT(*) FROM people WHERE household IN (1, 2, 3) AND income NOT IN (-1, 0.5)
