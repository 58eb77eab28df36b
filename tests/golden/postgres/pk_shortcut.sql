-- title: PRIMARY KEY: rows clipped only, no per-unit level
-- policy: demo
SELECT state, SUM(income), COUNT(*) FROM people_pk GROUP BY state;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CAST(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 500000000000 THEN 500000000000 ELSE _v0 END AS BIGINT)
  ) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1
FROM (
  SELECT
    _u,
    _g0,
    SUM(_x0) AS _v0,
    COUNT(*) AS _v1,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY COALESCE(
        HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
        HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
      ), _g0
    ) AS _rank
  FROM (
    SELECT
      people_pk.person_id AS _u,
      people_pk.state AS _g0,
      CAST(CASE
        WHEN people_pk.income < 0
        THEN 0
        WHEN people_pk.income > 500000
        THEN 500000
        ELSE people_pk.income
      END * 1000000 AS BIGINT) AS _x0
    FROM people_pk AS people_pk
    WHERE
      NOT people_pk.person_id IS NULL
      AND people_pk.state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 1
GROUP BY
  _g0
