-- title: AVG as a centered sum over a count
-- policy: demo
SELECT AVG(income) FROM people;
SELECT
  SUM(
    CAST(CASE
      WHEN _v0 < -500000000000
      THEN -500000000000
      WHEN _v0 > 500000000000
      THEN 500000000000
      ELSE _v0
    END AS BIGINT)
  ) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1
FROM (
  SELECT
    _u,
    SUM(CAST(_x0 AS BIGINT) * 2 - 500000000000) AS _v0,
    COUNT(_x1) AS _v1
  FROM (
    SELECT
      people.person_id AS _u,
      CAST(CASE
        WHEN people.income < 0
        THEN 0
        WHEN people.income > 500000
        THEN 500000
        ELSE people.income
      END * 1000000 AS BIGINT) AS _x0,
      people.income AS _x1
    FROM people AS people
    WHERE
      NOT people.person_id IS NULL
  ) AS _rows
  GROUP BY
    _u
  ORDER BY
    _u
) AS _per_unit
