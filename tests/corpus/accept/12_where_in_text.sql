-- title: IN and NOT IN on a text column
SELECT COUNT(*) FROM people WHERE state IN ('CA', 'NY') AND city NOT IN ('Springfield')
