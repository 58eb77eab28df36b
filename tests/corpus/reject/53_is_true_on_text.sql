-- title: IS TRUE on a text column: a row-dependent cast error (membership oracle)
-- expect: IS TRUE
SELECT COUNT(*) FROM people WHERE person_id = 42 AND city IS TRUE
