-- title: A LEFT JOIN that would NULL-extend the protected table
-- expect: a LEFT JOIN onto a protected table is not allowed
SELECT COUNT(*) FROM regions r LEFT JOIN people p ON p.state = r.state
