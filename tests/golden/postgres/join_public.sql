-- title: A public table joined; its column is a key whose domain is the public table's values
-- policy: demo
SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  COUNT(*) AS _v0
FROM (
  SELECT DISTINCT ON (_u)
    _g0
  FROM (
    SELECT
      p.person_id AS _u,
      r.region AS _g0
    FROM people AS p
    JOIN regions AS r
      ON p.state = r.state
    WHERE
      NOT p.person_id IS NULL
  ) AS _rows
  ORDER BY
    _u,
    COALESCE(
      HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
      HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
    ),
    _g0
) AS _per_unit
GROUP BY
  _g0
