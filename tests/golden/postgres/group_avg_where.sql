-- title: GROUP BY with AVG and WHERE
-- policy: demo
SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
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
    _g0,
    SUM(CAST(_x0 AS BIGINT) * 2 - 500000000000) FILTER(WHERE
      _h) AS _v0,
    COUNT(_x1) FILTER(WHERE
      _h) AS _v1,
    COUNT(*) FILTER(WHERE
      _h) AS _hits,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY CASE WHEN COUNT(*) FILTER(WHERE
        _h) > 0 THEN 0 ELSE 1 END, COALESCE(
        HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
        HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
      ), _g0
    ) AS _rank
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
) AS _per_unit
WHERE
  _rank <= 1 AND _hits > 0
GROUP BY
  _g0
