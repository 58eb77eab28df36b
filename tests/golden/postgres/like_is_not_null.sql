-- title: LIKE patterns with % next to the salt placeholder; IS NOT NULL and ILIKE kept negated
-- policy: demo
SELECT state, COUNT(*), SUM(cost) FROM visits WHERE kind LIKE '%a%' AND cost IS NOT NULL AND kind NOT ILIKE 'L%' GROUP BY state;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(LEAST(_v0, 5)) AS _v0,
  SUM(
    CAST(CASE WHEN _v1 < 0 THEN 0 WHEN _v1 > 10000000000 THEN 10000000000 ELSE _v1 END AS BIGINT)
  ) AS _v1
FROM (
  SELECT
    _u,
    _g0,
    COUNT(*) FILTER(WHERE
      _h) AS _v0,
    SUM(_x1) FILTER(WHERE
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
      visits.person_id AS _u,
      visits.state AS _g0,
      CASE
        WHEN (
          visits.kind LIKE '%a%' ESCAPE '\'
          AND NOT visits.cost IS NULL
          AND NOT visits.kind ILIKE 'L%' ESCAPE '\'
        )
        THEN CAST(CASE
          WHEN visits.cost < 0
          THEN 0
          WHEN visits.cost > 2000
          THEN 2000
          ELSE visits.cost
        END * 1000000 AS BIGINT)
      END AS _x1,
      (
        visits.kind LIKE '%a%' ESCAPE '\'
        AND NOT visits.cost IS NULL
        AND NOT visits.kind ILIKE 'L%' ESCAPE '\'
      ) AS _h
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
  _rank <= 2 AND _hits > 0
GROUP BY
  _g0
