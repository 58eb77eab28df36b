-- title: several rows and groups per unit
-- policy: demo
SELECT state, SUM(cost) FROM visits GROUP BY state;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CAST(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 10000000000 THEN 10000000000 ELSE _v0 END AS BIGINT)
  ) AS _v0
FROM (
  SELECT
    _u,
    _g0,
    SUM(_x0) AS _v0,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY COALESCE(
        HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
        HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
      ), _g0
    ) AS _rank
  FROM (
    SELECT
      visits.person_id AS _u,
      visits.state AS _g0,
      CAST(CASE
        WHEN visits.cost < 0
        THEN 0
        WHEN visits.cost > 2000
        THEN 2000
        ELSE visits.cost
      END * 1000000 AS BIGINT) AS _x0
    FROM visits AS visits
    WHERE
      NOT visits.person_id IS NULL
      AND visits.state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 2
GROUP BY
  _g0
