-- title: REGR_SLOPE per group by sample-and-aggregate: group choice by rank, blocks per group, partition selection
-- policy: demo_sa
SELECT education, REGR_SLOPE(cost, age) FROM visits JOIN people USING (person_id) WHERE kind = 'lab' GROUP BY education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CAST(2 AS DECIMAL) * CAST(CASE
      WHEN CAST(CASE WHEN _r0 < -1000 THEN -1000 WHEN _r0 > 10000 THEN 10000 ELSE _r0 END * 1000000 AS BIGINT) < -1000000000
      THEN -1000000000
      WHEN CAST(CASE WHEN _r0 < -1000 THEN -1000 WHEN _r0 > 10000 THEN 10000 ELSE _r0 END * 1000000 AS BIGINT) > 10000000000
      THEN 10000000000
      ELSE CAST(CASE WHEN _r0 < -1000 THEN -1000 WHEN _r0 > 10000 THEN 10000 ELSE _r0 END * 1000000 AS BIGINT)
    END AS DECIMAL) - CAST(9000000000 AS DECIMAL)
  ) AS _v0
FROM (
  SELECT
    _g0,
    _blk,
    NULLIF(REGR_SLOPE(_a0, _b0) FILTER(WHERE
      _h), CAST('NaN' AS DOUBLE PRECISION)) AS _r0
  FROM (
    SELECT
      _u,
      _g0,
      _a0,
      _b0,
      _h,
      (
        (
          HASHINT8EXTENDED(CAST(_u AS BIGINT), %(salt)s) % 8
        ) + 8
      ) % 8 AS _blk,
      DENSE_RANK() OVER (
        PARTITION BY _u
        ORDER BY 1 - _hg, COALESCE(
          HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
          HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
        ), _g0
      ) AS _rank
    FROM (
      SELECT
        _u,
        _g0,
        _a0,
        _b0,
        _h,
        MAX(CASE WHEN _h THEN 1 ELSE 0 END) OVER (PARTITION BY _u, _g0) AS _hg
      FROM (
        SELECT
          visits.person_id AS _u,
          people.education AS _g0,
          CAST(ROUND(
            CAST(CASE
              WHEN visits.cost < 0
              THEN 0
              WHEN visits.cost > 2000
              THEN 2000
              ELSE visits.cost
            END AS DECIMAL),
            15
          ) AS DOUBLE PRECISION) AS _a0,
          CAST(ROUND(
            CAST(CASE WHEN people.age < 0 THEN 0 WHEN people.age > 120 THEN 120 ELSE people.age END AS DECIMAL),
            15
          ) AS DOUBLE PRECISION) AS _b0,
          (
            visits.kind = 'lab'
          ) AS _h
        FROM visits AS visits
        JOIN people AS people
          ON visits.person_id = people.person_id
        WHERE
          NOT visits.person_id IS NULL
          AND people.education IN ('none', 'high_school', 'bachelor', 'master', 'phd')
      ) AS _rows
    ) AS _rows
  ) AS _ranked
  WHERE
    _rank <= 2
  GROUP BY
    _g0,
    _blk
) AS _blocks
GROUP BY
  _g0
