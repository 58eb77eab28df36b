-- title: INSERT
-- expect: INSERT is not allowed
INSERT INTO people (person_id, age) VALUES (999999, 40)
