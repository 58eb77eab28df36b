-- title: A semi-join on a public table's column
-- expect: a semi-join on public tables is not allowed
SELECT COUNT(*) FROM people p WHERE p.state IN (SELECT r.state FROM regions r)
