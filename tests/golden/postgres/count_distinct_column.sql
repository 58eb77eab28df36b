-- title: COUNT(DISTINCT col) of a non-unit column: each unit's values bounded (salted choice), groups ranked
-- policy: demo
SELECT kind, COUNT(DISTINCT state) AS n, COUNT(*) AS c FROM visits WHERE cost > 10 GROUP BY kind;
SELECT
  _m._k0,
  _m._v0,
  _dc0._d0
FROM (
  SELECT
    CAST(_g0 AS TEXT) AS _k0,
    SUM(LEAST(_v0, 5)) AS _v0
  FROM (
    SELECT
      _u,
      _g0,
      COUNT(*) FILTER(WHERE
        _h) AS _v0,
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
        visits.kind AS _g0,
        (
          visits.cost > CAST(10.0 AS DOUBLE PRECISION)
        ) AS _h
      FROM visits AS visits
      WHERE
        NOT visits.person_id IS NULL
        AND visits.kind IN ('checkup', 'lab', 'specialist', 'emergency')
    ) AS _rows
    GROUP BY
      _u,
      _g0
  ) AS _per_unit
  WHERE
    _rank <= 2 AND _hits > 0
  GROUP BY
    _g0
) AS _m
LEFT JOIN (
  SELECT
    CAST(_g0 AS TEXT) AS _k0,
    COUNT(DISTINCT _dv) AS _d0
  FROM (
    SELECT
      _g0,
      _dv,
      ROW_NUMBER() OVER (
        PARTITION BY _u, _g0
        ORDER BY COALESCE(
          HASHTEXTEXTENDED(_dv COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
          HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
        ), _dv
      ) AS _r,
      DENSE_RANK() OVER (
        PARTITION BY _u
        ORDER BY COALESCE(
          HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
          HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
        ), _g0
      ) AS _rank
    FROM (
      SELECT
        _u,
        _g0,
        _dv
      FROM (
        SELECT
          visits.person_id AS _u,
          visits.kind AS _g0,
          (
            visits.cost > CAST(10.0 AS DOUBLE PRECISION)
          ) AS _h,
          visits.state AS _dv
        FROM visits AS visits
        WHERE
          NOT visits.person_id IS NULL
          AND visits.kind IN ('checkup', 'lab', 'specialist', 'emergency')
      ) AS _rows
      GROUP BY
        _u,
        _g0,
        _dv
      HAVING
        COUNT(_dv) FILTER(WHERE
          _h) > 0
    ) AS _per_value
  ) AS _chosen
  WHERE
    _r <= 5 AND _rank <= 2
  GROUP BY
    _g0
) AS _dc0
  ON _m._k0 IS NOT DISTINCT FROM _dc0._k0
