-- title: two public keys: 2 x 5 groups
-- policy: demo
SELECT sex, education, COUNT(*) FROM people GROUP BY sex, education;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  CAST(_g1 AS TEXT) AS _k1,
  COUNT(*) AS _v0
FROM (
  SELECT DISTINCT ON (_u)
    _g0,
    _g1
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
  ORDER BY
    _u,
    HASHINT8EXTENDED(
      HASH_RECORD_EXTENDED(ROW(_u, _g0 COLLATE pg_catalog."C", _g1 COLLATE pg_catalog."C"), %(salt)s),
      %(salt)s
    ),
    _g0,
    _g1
) AS _per_unit
GROUP BY
  _g0,
  _g1
