-- title: VARIANCE and STDDEV from noisy sums (centered sum, squared sum, count)
-- policy: demo
SELECT education, VAR_POP(age), STDDEV(income) FROM people GROUP BY education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(CASE WHEN _v0 < -120 THEN -120 WHEN _v0 > 120 THEN 120 ELSE _v0 END) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1,
  SUM(CASE WHEN _v2 < 0 THEN 0 WHEN _v2 > 14400 THEN 14400 ELSE _v2 END) AS _v2,
  SUM(
    CASE
      WHEN _v3 < -500000000000
      THEN -500000000000
      WHEN _v3 > 500000000000
      THEN 500000000000
      ELSE _v3
    END
  ) AS _v3,
  SUM(LEAST(_v4, 1)) AS _v4,
  SUM(
    CASE
      WHEN _v5 < 0
      THEN 0
      WHEN _v5 > 250000000000000000000000
      THEN 250000000000000000000000
      ELSE _v5
    END
  ) AS _v5
FROM (
  WITH _p AS (
    SELECT
      _u,
      _g0,
      CAST(2 AS INT128) * SUM(CASE WHEN _x0 < 0 THEN 0 WHEN _x0 > 120 THEN 120 ELSE _x0 END) - CAST(120 AS INT128) * COUNT(_x0) AS _v0,
      COUNT(_x1) AS _v1,
      SUM(
        (
          CAST(2 AS INT128) * CAST(CASE WHEN _x2 < 0 THEN 0 WHEN _x2 > 120 THEN 120 ELSE _x2 END AS INT128) - CAST(120 AS INT128)
        ) * (
          CAST(2 AS INT128) * CAST(CASE WHEN _x2 < 0 THEN 0 WHEN _x2 > 120 THEN 120 ELSE _x2 END AS INT128) - CAST(120 AS INT128)
        )
      ) AS _v2,
      CAST(2 AS INT128) * SUM(_x3) - CAST(500000000000 AS INT128) * COUNT(_x3) AS _v3,
      COUNT(_x4) AS _v4,
      SUM(
        (
          CAST(2 AS INT128) * CAST(_x5 AS INT128) - CAST(500000000000 AS INT128)
        ) * (
          CAST(2 AS INT128) * CAST(_x5 AS INT128) - CAST(500000000000 AS INT128)
        )
      ) AS _v5
    FROM (
      SELECT
        people.person_id AS _u,
        people.education AS _g0,
        people.age AS _x0,
        people.age AS _x1,
        people.age AS _x2,
        CAST(CASE
          WHEN people.income < 0
          THEN 0
          WHEN people.income > 500000
          THEN 500000
          ELSE people.income
        END * 1000000 AS BIGINT) AS _x3,
        people.income AS _x4,
        CAST(CASE
          WHEN people.income < 0
          THEN 0
          WHEN people.income > 500000
          THEN 500000
          ELSE people.income
        END * 1000000 AS BIGINT) AS _x5
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
    ROW_NUMBER() OVER (PARTITION BY _u ORDER BY HASH(_u, _g0, $salt), _g0) AS _rank
  FROM _p
  WHERE
    _u IN (
      SELECT
        _u
      FROM _many
    )
) AS _per_unit
WHERE
  _rank <= 1
GROUP BY
  _g0
