-- title: integer column with whole bounds sums as integers
-- policy: demo
SELECT SUM(age), AVG(age) FROM people WHERE sex = 'F' OR income IS NULL;
SELECT
  SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 120 THEN 120 ELSE _v0 END) AS _v0,
  SUM(CASE WHEN _v1 < -120 THEN -120 WHEN _v1 > 120 THEN 120 ELSE _v1 END) AS _v1,
  SUM(LEAST(_v2, 1)) AS _v2
FROM (
  SELECT
    _u,
    SUM(CASE WHEN _x0 < 0 THEN 0 WHEN _x0 > 120 THEN 120 ELSE _x0 END) FILTER(WHERE
      _h) AS _v0,
    CAST(2 AS INT128) * SUM(CASE WHEN _x1 < 0 THEN 0 WHEN _x1 > 120 THEN 120 ELSE _x1 END) FILTER(WHERE
      _h) - CAST(120 AS INT128) * COUNT(_x1) FILTER(WHERE
      _h) AS _v1,
    COUNT(_x2) FILTER(WHERE
      _h) AS _v2,
    COUNT(*) FILTER(WHERE
      _h) AS _hits
  FROM (
    SELECT
      people.person_id AS _u,
      people.age AS _x0,
      people.age AS _x1,
      people.age AS _x2,
      (
        people.sex = 'F' OR people.income IS NULL
      ) AS _h
    FROM people AS people
    WHERE
      NOT people.person_id IS NULL
  ) AS _rows
  GROUP BY
    _u
) AS _per_unit
WHERE
  _hits > 0
