-- title: Aggregate FILTER and COUNT(DISTINCT unit)
-- policy: demo
SELECT state, COUNT(*) FILTER (WHERE cost > 100) AS costly, COUNT(DISTINCT person_id) AS people FROM visits GROUP BY state;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(LEAST(_v0, 5)) AS _v0,
  SUM(LEAST(_v1, 1)) AS _v1
FROM (
  SELECT
    _u,
    _g0,
    COUNT(*) FILTER(WHERE
      _f0) AS _v0,
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
      visits.person_id AS _u,
      visits.state AS _g0,
      (
        visits.cost > CAST(100.0 AS DOUBLE PRECISION)
      ) AS _f0
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
