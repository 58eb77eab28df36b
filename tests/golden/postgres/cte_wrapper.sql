-- title: A row-level CTE inside a BI tool's wrapper (post-processing of the released rows)
-- policy: demo
SELECT * FROM (WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT state, SUM(income) AS total FROM adults GROUP BY state) AS virtual_table LIMIT 1000;
SELECT
  CAST(_g0 AS TEXT) AS _k0,
  SUM(
    CAST(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > 500000000000 THEN 500000000000 ELSE _v0 END AS BIGINT)
  ) AS _v0
FROM (
  SELECT
    _u,
    _g0,
    SUM(_x0) FILTER(WHERE
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
      people.person_id AS _u,
      people.state AS _g0,
      CASE
        WHEN (
          people.age >= 18
        )
        THEN CAST(CASE
          WHEN people.income < 0
          THEN 0
          WHEN people.income > 500000
          THEN 500000
          ELSE people.income
        END * 1000000 AS BIGINT)
      END AS _x0,
      (
        people.age >= 18
      ) AS _h
    FROM people AS people
    WHERE
      NOT people.person_id IS NULL
      AND people.state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')
  ) AS _rows
  GROUP BY
    _u,
    _g0
) AS _per_unit
WHERE
  _rank <= 1 AND _hits > 0
GROUP BY
  _g0
