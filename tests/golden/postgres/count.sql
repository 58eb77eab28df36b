-- title: COUNT(*) over a bounded table
-- policy: demo
SELECT COUNT(*) FROM people;
SELECT
  COUNT(DISTINCT _u) AS _v0
FROM (
  SELECT
    people.person_id AS _u
  FROM people AS people
  WHERE
    NOT people.person_id IS NULL
) AS _rows
