-- title: IS NULL and IS NOT NULL
SELECT COUNT(*) FROM people WHERE income IS NOT NULL AND visit_date IS NULL
