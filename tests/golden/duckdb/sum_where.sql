-- title: SUM with a WHERE clause
-- policy: demo
SELECT SUM(income) FROM people WHERE age BETWEEN 30 AND 40 AND state IN ('CA', 'NY');
SELECT
  SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 500000000000 THEN 500000000000 ELSE _v0 END) AS _v0
FROM (
  SELECT
    _u,
    SUM(_x0) FILTER(WHERE
      _h) AS _v0,
    COUNT(*) FILTER(WHERE
      _h) AS _hits
  FROM (
    SELECT
      people.person_id AS _u,
      CASE
        WHEN (
          people.age BETWEEN 30 AND 40 AND people.state IN ('CA', 'NY')
        )
        THEN CAST(CASE
          WHEN people.income < 0
          THEN 0
          WHEN people.income > 500000
          THEN 500000
          ELSE people.income
        END * 1000000 AS BIGINT)
      END AS _x0,
      (
        people.age BETWEEN 30 AND 40 AND people.state IN ('CA', 'NY')
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
