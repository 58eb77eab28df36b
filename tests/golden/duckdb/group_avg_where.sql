-- title: GROUP BY with AVG and WHERE
-- policy: demo
SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CASE
      WHEN _v0 < -500000000000
      THEN -500000000000
      WHEN _v0 > 500000000000
      THEN 500000000000
      ELSE _v0
    END
  ) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1
FROM (
  WITH _p AS (
    SELECT
      _u,
      _g0,
      CAST(2 AS INT128) * SUM(_x0) FILTER(WHERE
        _h) - CAST(500000000000 AS INT128) * COUNT(_x0) FILTER(WHERE
        _h) AS _v0,
      COUNT(_x1) FILTER(WHERE
        _h) AS _v1,
      COUNT(*) FILTER(WHERE
        _h) AS _hits
    FROM (
      SELECT
        people.person_id AS _u,
        people.education AS _g0,
        CASE
          WHEN (
            people.age > 30
          )
          THEN CAST(CASE
            WHEN people.income < 0
            THEN 0
            WHEN people.income > 500000
            THEN 500000
            ELSE people.income
          END * 1000000 AS BIGINT)
        END AS _x0,
        CASE WHEN (
          people.age > 30
        ) THEN people.income END AS _x1,
        (
          people.age > 30
        ) AS _h
      FROM people AS people
      WHERE
        NOT people.person_id IS NULL
        AND people.education IN ('none', 'high_school', 'bachelor', 'master', 'phd')
    ) AS _rows
    GROUP BY
      _u,
      _g0
  ), _many AS (
    SELECT
      _u
    FROM _p
    GROUP BY
      _u
    HAVING
      COUNT(*) > 1
  )
  SELECT
    _p.*,
    1 AS _rank
  FROM _p
  LEFT JOIN _many
    ON _many._u = _p._u
  WHERE
    _many._u IS NULL
  UNION ALL
  SELECT
    _p.*,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY CASE WHEN _p._hits > 0 THEN 0 ELSE 1 END, HASH(_u, _g0, $salt), _g0
    ) AS _rank
  FROM _p
  WHERE
    _u IN (
      SELECT
        _u
      FROM _many
    )
) AS _per_unit
WHERE
  _rank <= 1 AND _hits > 0
GROUP BY
  _g0
