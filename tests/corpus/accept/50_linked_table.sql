-- title: A linked table: each note belongs to the person of its visit
SELECT topic, COUNT(*), AVG(words)
FROM notes
WHERE written >= DATE '2023-06-15'
GROUP BY topic
