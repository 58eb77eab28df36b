-- title: A semi-join on the unit in WHERE
-- policy: demo
SELECT sex, COUNT(*) FROM people WHERE person_id IN (SELECT person_id FROM visits WHERE kind = 'lab') GROUP BY sex;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  COUNT(*) AS _v0
FROM (
  SELECT DISTINCT ON (_u)
    _g0,
    CASE WHEN _h THEN 1 ELSE 0 END AS _hit
  FROM (
    SELECT
      people.person_id AS _u,
      people.sex AS _g0,
      (
        COALESCE(_s1._in, 0) > 0
      ) AS _h
    FROM people AS people
    LEFT JOIN (
      SELECT
        visits.person_id AS _u,
        COUNT(*) FILTER(WHERE
          (
            visits.kind = 'lab'
          )) AS _in
      FROM visits AS visits
      WHERE
        NOT visits.person_id IS NULL
      GROUP BY
        visits.person_id
    ) AS _s1
      ON _s1._u = people.person_id
    WHERE
      NOT people.person_id IS NULL AND people.sex IN ('F', 'M')
  ) AS _rows
  ORDER BY
    _u,
    _hit DESC NULLS LAST,
    COALESCE(
      HASHTEXTEXTENDED(_g0 COLLATE pg_catalog."C", CAST(_u AS BIGINT) # %(salt)s),
      HASHINT8EXTENDED(CAST(_u AS BIGINT) # %(salt)s, 0)
    ),
    _g0
) AS _per_unit
WHERE
  _hit = 1
GROUP BY
  _g0
