-- title: GROUP BY an integer bucket (derived public domain) with SUM of a CASE
-- policy: demo
SELECT age / 10 * 10 AS band, SUM(CASE WHEN sex = 'F' THEN 1 ELSE 0 END) AS women FROM people GROUP BY band;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(CAST(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 1 THEN 1 ELSE _v0 END AS BIGINT)) AS _v0
FROM (
  SELECT
    _u,
    _g0,
    SUM(CASE WHEN _x0 < 0 THEN 0 WHEN _x0 > 1 THEN 1 ELSE _x0 END) AS _v0,
    ROW_NUMBER() OVER (
      PARTITION BY _u
      ORDER BY COALESCE(
        HASHINT8EXTENDED(CAST(_g0 AS BIGINT), CAST(_u AS BIGINT) # %(salt)s),
        HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
      ), _g0
    ) AS _rank
  FROM (
    SELECT
      people.person_id AS _u,
      (
        DIV(
          CAST(CASE WHEN people.age < 0 THEN 0 WHEN people.age > 120 THEN 120 ELSE people.age END AS BIGINT),
          10
        )
      ) * CAST(10 AS BIGINT) AS _g0,
      CASE WHEN people.sex = 'F' THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END AS _x0
    FROM people AS people
    WHERE
      NOT people.person_id IS NULL
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 1
GROUP BY
  _g0
