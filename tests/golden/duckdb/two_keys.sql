-- title: two public keys: 2 x 5 groups
-- policy: demo
SELECT sex, education, COUNT(*) FROM people GROUP BY sex, education;
SELECT CAST(_g0 AS TEXT) AS _k0, CAST(_g1 AS TEXT) AS _k1, SUM(LEAST(_v0, 1)) AS _v0 FROM (SELECT sex AS _g0, education AS _g1, COUNT(*) AS _v0, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY HASH(person_id, sex, education, $salt)) AS _rank FROM people WHERE NOT person_id IS NULL AND sex IN ('F', 'M') AND education IN ('none', 'high_school', 'bachelor', 'master', 'phd') GROUP BY person_id, sex, education) AS _per_unit WHERE _rank <= 1 GROUP BY _g0, _g1
