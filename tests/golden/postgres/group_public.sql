-- title: GROUP BY a public domain: domain filter, group choice among 8 groups
-- policy: demo
SELECT state, COUNT(*) AS n FROM people GROUP BY state;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  COUNT(*) AS _v0
FROM (
  SELECT DISTINCT ON (_u)
    _g0
  FROM (
    SELECT
      people.person_id AS _u,
      people.state AS _g0
    FROM people AS people
    WHERE
      NOT people.person_id IS NULL
      AND people.state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')
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
