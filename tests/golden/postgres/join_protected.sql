-- title: Two protected tables joined on the unit, a key from each side's columns
-- policy: demo
SELECT v.kind, COUNT(*), AVG(v.cost) FROM visits v JOIN people p ON v.person_id = p.person_id WHERE p.age > 40 GROUP BY v.kind;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(LEAST(_v0, 5)) AS _v0,
  SUM(
    CAST(CASE
      WHEN _v1 < -10000000000
      THEN -10000000000
      WHEN _v1 > 10000000000
      THEN 10000000000
      ELSE _v1
    END AS BIGINT)
  ) AS _v1,
  SUM(LEAST(_v2, 5)) AS _v2
FROM (
  SELECT
    _u,
    _g0,
    COUNT(*) FILTER(WHERE
      _h) AS _v0,
    SUM(CAST(_x1 AS BIGINT) * 2 - 2000000000) FILTER(WHERE
      _h) AS _v1,
    COUNT(_x2) FILTER(WHERE
      _h) AS _v2,
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
      v.person_id AS _u,
      v.kind AS _g0,
      CASE
        WHEN (
          p.age > 40
        )
        THEN CAST(CASE WHEN v.cost < 0 THEN 0 WHEN v.cost > 2000 THEN 2000 ELSE v.cost END * 1000000 AS BIGINT)
      END AS _x1,
      CASE WHEN (
        p.age > 40
      ) THEN v.cost END AS _x2,
      (
        p.age > 40
      ) AS _h
    FROM visits AS v
    JOIN people AS p
      ON v.person_id = p.person_id
    WHERE
      NOT v.person_id IS NULL
      AND v.kind IN ('checkup', 'lab', 'specialist', 'emergency')
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 2 AND _hits > 0
GROUP BY
  _g0
