-- title: Division in WHERE can fail on some rows
-- expect: division in WHERE
SELECT COUNT(*) FROM people WHERE income / age > 1000
