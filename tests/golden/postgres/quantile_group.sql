-- title: quantiles: median and MAX per kind over visits, with WHERE (per-unit histogram, group choice)
-- policy: demo
SELECT kind, MEDIAN(cost) AS m, MAX(cost) AS hi, COUNT(*) AS n FROM visits WHERE cost > 10 GROUP BY kind;
SELECT
  _m._k0,
  _m._v0,
  _q0._qh0
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
    STRING_AGG(CAST(_b AS TEXT) || ':' || CAST(_c AS TEXT), ',') AS _qh0
  FROM (
    SELECT
      _g0,
      _b,
      CAST(SUM(
        CASE
          WHEN _cum <= 5
          THEN _n
          WHEN (
            _cum - _n
          ) < 5
          THEN 5 - (
            _cum - _n
          )
          ELSE 0
        END
      ) AS BIGINT) AS _c
    FROM (
      SELECT
        _g0,
        _b,
        _n,
        SUM(_n) OVER (
          PARTITION BY _u, _g0
          ORDER BY COALESCE(
            HASHINT8EXTENDED(CAST(_b AS BIGINT), CAST(_u AS BIGINT) # %(salt)s),
            HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
          ), _b
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS _cum,
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
          CASE WHEN _bin < 0 THEN 0 WHEN _bin > 1023 THEN 1023 ELSE _bin END AS _b,
          COUNT(_bin) FILTER(WHERE
            _h) AS _n
        FROM (
          SELECT
            visits.person_id AS _u,
            visits.kind AS _g0,
            (
              visits.cost > CAST(10.0 AS DOUBLE PRECISION)
            ) AS _h,
            CAST(FLOOR(
              (
                CAST(CASE
                  WHEN visits.cost < 0
                  THEN 0
                  WHEN visits.cost > 2000
                  THEN 2000
                  ELSE visits.cost
                END AS DECIMAL) - CAST(0 AS DECIMAL)
              ) / CAST(2000 AS DECIMAL) * 1024
            ) AS BIGINT) AS _bin
          FROM visits AS visits
          WHERE
            NOT visits.person_id IS NULL
            AND visits.kind IN ('checkup', 'lab', 'specialist', 'emergency')
        ) AS _rows
        GROUP BY
          _u,
          _g0,
          CASE WHEN _bin < 0 THEN 0 WHEN _bin > 1023 THEN 1023 ELSE _bin END
        HAVING
          COUNT(_bin) FILTER(WHERE
            _h) > 0
      ) AS _per_bin
    ) AS _chosen
    WHERE
      CASE
        WHEN _cum <= 5
        THEN _n
        WHEN (
          _cum - _n
        ) < 5
        THEN 5 - (
          _cum - _n
        )
        ELSE 0
      END > 0
      AND _rank <= 2
    GROUP BY
      _g0,
      _b
  ) AS _bins
  GROUP BY
    _g0
) AS _q0
  ON _m._k0 IS NOT DISTINCT FROM _q0._k0
