-- title: quantile without keys: PERCENTILE_CONT with DESC (q -> 1 - q), per-unit histogram
-- policy: demo
SELECT PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY income DESC) AS p FROM people_pk;
SELECT
  _q0._qh0
FROM (
  SELECT
    STRING_AGG(CAST(_b AS TEXT) || ':' || CAST(_c AS TEXT), ',') AS _qh0
  FROM (
    SELECT
      _b,
      CAST(SUM(
        CASE
          WHEN _cum <= 1
          THEN _n
          WHEN (
            _cum - _n
          ) < 1
          THEN 1 - (
            _cum - _n
          )
          ELSE 0
        END
      ) AS BIGINT) AS _c
    FROM (
      SELECT
        _b,
        _n,
        SUM(_n) OVER (
          PARTITION BY _u
          ORDER BY COALESCE(
            HASHINT8EXTENDED(CAST(_b AS BIGINT), CAST(_u AS BIGINT) # %(salt)s),
            HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
          ), _b
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS _cum
      FROM (
        SELECT
          _u,
          CASE WHEN _bin < 0 THEN 0 WHEN _bin > 1023 THEN 1023 ELSE _bin END AS _b,
          COUNT(_bin) AS _n
        FROM (
          SELECT
            people_pk.person_id AS _u,
            CAST(FLOOR(
              (
                CAST(CASE
                  WHEN people_pk.income < 0
                  THEN 0
                  WHEN people_pk.income > 500000
                  THEN 500000
                  ELSE people_pk.income
                END AS DECIMAL) - CAST(0 AS DECIMAL)
              ) / CAST(500000 AS DECIMAL) * 1024
            ) AS BIGINT) AS _bin
          FROM people_pk AS people_pk
          WHERE
            NOT people_pk.person_id IS NULL
        ) AS _rows
        GROUP BY
          _u,
          CASE WHEN _bin < 0 THEN 0 WHEN _bin > 1023 THEN 1023 ELSE _bin END
        HAVING
          COUNT(_bin) > 0
      ) AS _per_bin
    ) AS _chosen
    WHERE
      CASE
        WHEN _cum <= 1
        THEN _n
        WHEN (
          _cum - _n
        ) < 1
        THEN 1 - (
          _cum - _n
        )
        ELSE 0
      END > 0
    GROUP BY
      _b
  ) AS _bins
) AS _q0
