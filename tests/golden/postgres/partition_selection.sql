-- title: undeclared domain: unit count for partition selection
-- policy: demo
SELECT visit_date, COUNT(*) FROM visits WHERE visit_date >= DATE '2024-01-01' GROUP BY visit_date;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(LEAST(_v0, 5)) AS _v0,
  COUNT(*) AS _units
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
        _h) > 0 THEN 0 ELSE 1 END, HASHINT8EXTENDED(HASH_RECORD_EXTENDED(ROW(_u, _g0), %(salt)s), %(salt)s), _g0
    ) AS _rank
  FROM (
    SELECT
      visits.person_id AS _u,
      visits.visit_date AS _g0,
      (
        visits.visit_date >= CAST('2024-01-01' AS DATE)
      ) AS _h
    FROM visits AS visits
    WHERE
      NOT visits.person_id IS NULL
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 2 AND _hits > 0
GROUP BY
  _g0
