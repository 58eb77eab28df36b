-- title: two public keys: 2 x 5 groups
-- policy: demo
SELECT sex, education, COUNT(*) FROM people GROUP BY sex, education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  CAST(_g1 AS TEXT) AS _k1,
  SUM(LEAST(_v0, 1)) AS _v0
FROM (
  WITH _p AS (
    SELECT
      _u,
      _g0,
      _g1,
      COUNT(*) AS _v0
    FROM (
      SELECT
        people.person_id AS _u,
        people.sex AS _g0,
        people.education AS _g1
      FROM people AS people
      WHERE
        NOT people.person_id IS NULL
        AND people.sex IN ('F', 'M')
        AND people.education IN ('none', 'high_school', 'bachelor', 'master', 'phd')
    ) AS _rows
    GROUP BY
      _u,
      _g0,
      _g1
  ), _many AS (
    SELECT
      _u
    FROM _p
    GROUP BY
      _u
    HAVING
      COUNT(*) > 1
  )
  SELECT
    _p.*,
    1 AS _rank
  FROM _p
  LEFT JOIN _many
    ON _many._u = _p._u
  WHERE
    _many._u IS NULL
  UNION ALL
  SELECT
    _p.*,
    ROW_NUMBER() OVER (PARTITION BY _u ORDER BY HASH(_u, _g0, _g1, $salt), _g0, _g1) AS _rank
  FROM _p
  WHERE
    _u IN (
      SELECT
        _u
      FROM _many
    )
) AS _per_unit
WHERE
  _rank <= 1
GROUP BY
  _g0,
  _g1
