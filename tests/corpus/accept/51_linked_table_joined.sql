-- title: A linked table joined through its link to the table it links to
SELECT v.kind, COUNT(*)
FROM notes n JOIN visits v ON n.visit_id = v.visit_id
GROUP BY v.kind
