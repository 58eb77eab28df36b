-- title: Literal on the left of a comparison
SELECT COUNT(*) FROM people WHERE 30 < age AND 'CA' <> state
