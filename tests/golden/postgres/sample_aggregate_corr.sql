-- title: CORR by sample-and-aggregate: per block of units, clamped, centered sum of the block values
-- policy: demo_sa
SELECT CORR(age, income) FILTER (WHERE sex = 'F') FROM people WHERE age > 30;
SELECT
  SUM(
    CAST(2 AS DECIMAL) * CAST(CASE
      WHEN CAST(CASE WHEN _r0 < -1 THEN -1 WHEN _r0 > 1 THEN 1 ELSE _r0 END * 1000000 AS BIGINT) < -1000000
      THEN -1000000
      WHEN CAST(CASE WHEN _r0 < -1 THEN -1 WHEN _r0 > 1 THEN 1 ELSE _r0 END * 1000000 AS BIGINT) > 1000000
      THEN 1000000
      ELSE CAST(CASE WHEN _r0 < -1 THEN -1 WHEN _r0 > 1 THEN 1 ELSE _r0 END * 1000000 AS BIGINT)
    END AS DECIMAL) - CAST(0 AS DECIMAL)
  ) AS _v0
FROM (
  SELECT
    _blk,
    NULLIF(CORR(_a0, _b0) FILTER(WHERE
      _h AND _f0), CAST('NaN' AS DOUBLE PRECISION)) AS _r0
  FROM (
    SELECT
      _u,
      _a0,
      _b0,
      _h,
      _f0,
      (
        (
          HASHINT8EXTENDED(CAST(_u AS BIGINT), %(salt)s) % 8
        ) + 8
      ) % 8 AS _blk
    FROM (
      SELECT
        people.person_id AS _u,
        CAST(ROUND(
          CAST(CASE WHEN people.age < 0 THEN 0 WHEN people.age > 120 THEN 120 ELSE people.age END AS DECIMAL),
          15
        ) AS DOUBLE PRECISION) AS _a0,
        CAST(ROUND(
          CAST(CASE
            WHEN people.income < 0
            THEN 0
            WHEN people.income > 500000
            THEN 500000
            ELSE people.income
          END AS DECIMAL),
          15
        ) AS DOUBLE PRECISION) AS _b0,
        (
          people.age > 30
        ) AS _h,
        (
          people.sex = 'F'
        ) AS _f0
      FROM people AS people
      WHERE
        NOT people.person_id IS NULL
    ) AS _rows
  ) AS _ranked
  GROUP BY
    _blk
) AS _blocks
