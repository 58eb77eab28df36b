-- title: UPDATE
-- expect: UPDATE is not allowed
UPDATE people SET income = 0 WHERE person_id = 1
