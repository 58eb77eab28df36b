-- title: Comments are ignored
-- the number of adults
SELECT COUNT(*) /* all rows */ FROM people WHERE age >= 18 -- inclusive
