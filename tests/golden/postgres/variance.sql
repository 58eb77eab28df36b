-- title: VARIANCE and STDDEV from noisy sums (centered sum, squared sum, count)
-- policy: demo
SELECT education, VAR_POP(age), STDDEV(income) FROM people GROUP BY education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CAST(CASE WHEN _v0 < -120 THEN -120 WHEN _v0 > 120 THEN 120 ELSE _v0 END AS BIGINT)
  ) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1,
  SUM(
    CAST(CASE WHEN _v2 < 0 THEN 0 WHEN _v2 > 14400 THEN 14400 ELSE _v2 END AS BIGINT)
  ) AS _v2,
  SUM(
    CAST(CASE
      WHEN _v3 < -500000000000
      THEN -500000000000
      WHEN _v3 > 500000000000
      THEN 500000000000
      ELSE _v3
    END AS BIGINT)
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
  SELECT
    _u,
    _g0,
    SUM(
      CAST(CASE WHEN _x0 < 0 THEN 0 WHEN _x0 > 120 THEN 120 ELSE _x0 END AS BIGINT) * 2 - 120
    ) AS _v0,
    COUNT(_x1) AS _v1,
    SUM(
      (
        CAST(2 AS DECIMAL) * CAST(CASE WHEN _x2 < 0 THEN 0 WHEN _x2 > 120 THEN 120 ELSE _x2 END AS DECIMAL) - CAST(120 AS DECIMAL)
      ) * (
        CAST(2 AS DECIMAL) * CAST(CASE WHEN _x2 < 0 THEN 0 WHEN _x2 > 120 THEN 120 ELSE _x2 END AS DECIMAL) - CAST(120 AS DECIMAL)
      )
    ) AS _v2,
    SUM(CAST(_x3 AS BIGINT) * 2 - 500000000000) AS _v3,
    COUNT(_x4) AS _v4,
    SUM(
      (
        CAST(2 AS DECIMAL) * CAST(_x5 AS DECIMAL) - CAST(500000000000 AS DECIMAL)
      ) * (
        CAST(2 AS DECIMAL) * CAST(_x5 AS DECIMAL) - CAST(500000000000 AS DECIMAL)
      )
    ) AS _v5,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY COALESCE(
        HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
        HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
      ), _g0
    ) AS _rank
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
    OFFSET 0
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 1
GROUP BY
  _g0
