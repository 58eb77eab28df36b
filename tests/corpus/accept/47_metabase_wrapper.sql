-- title: Metabase's wrapper around a native query
SELECT "source"."state" AS "state", "source"."count" AS "count"
FROM (SELECT "people"."state" AS "state", COUNT(*) AS "count"
      FROM "people"
      GROUP BY "people"."state"
      ORDER BY "people"."state" ASC) AS "source"
LIMIT 2000
