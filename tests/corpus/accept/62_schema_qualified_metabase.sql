-- title: Metabase's form: table and columns qualified by the schema, every name quoted
SELECT "main"."people"."state" AS "state", COUNT(*) AS "count" FROM "main"."people" GROUP BY "main"."people"."state" ORDER BY "main"."people"."state" ASC
