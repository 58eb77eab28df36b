-- title: An aggregate over a per-unit subquery (visits per person)
-- policy: demo
SELECT AVG(n), COUNT(*) FROM (SELECT person_id, COUNT(*) AS n FROM visits WHERE cost > 100 GROUP BY person_id) t;
SELECT
  CAST(2 AS DECIMAL(38, 0)) * SUM(CASE WHEN _x0 < 0 THEN 0 WHEN _x0 > 10 THEN 10 ELSE _x0 END) FILTER(WHERE
    _h) - CAST(10 AS DECIMAL(38, 0)) * COUNT(_x0) FILTER(WHERE
    _h) AS _v0,
  COUNT(_x1) FILTER(WHERE
    _h) AS _v1,
  COUNT(*) FILTER(WHERE
    _h) AS _v2
FROM (
  SELECT
    t.person_id AS _u,
    CASE WHEN (
      t._pu_hits > 0
    ) THEN t.n END AS _x0,
    CASE WHEN (
      t._pu_hits > 0
    ) THEN t.n END AS _x1,
    (
      t._pu_hits > 0
    ) AS _h
  FROM (
    SELECT
      visits.person_id AS person_id,
      LEAST(COUNT(*) FILTER(WHERE
        (
          visits.cost > CAST(100.0 AS DOUBLE)
        )), 10) AS n,
      COUNT(*) FILTER(WHERE
        (
          visits.cost > CAST(100.0 AS DOUBLE)
        )) AS _pu_hits
    FROM visits AS visits
    WHERE
      NOT visits.person_id IS NULL
    GROUP BY
      visits.person_id
  ) AS t
) AS _rows
