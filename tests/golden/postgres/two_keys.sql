-- title: two public keys: 2 x 5 groups
-- policy: demo
SELECT sex, education, COUNT(*) FROM people GROUP BY sex, education;
SELECT CAST(_g0 AS TEXT) AS _k0, CAST(_g1 AS TEXT) AS _k1, COUNT(*) AS _v0 FROM (SELECT DISTINCT ON (person_id) sex AS _g0, education AS _g1 FROM people WHERE NOT person_id IS NULL AND sex IN ('F', 'M') AND education IN ('none', 'high_school', 'bachelor', 'master', 'phd') ORDER BY person_id, HASHTEXTEXTENDED(CAST(ROW(person_id, sex, education) AS TEXT), %(salt)s)) AS _per_unit GROUP BY _g0, _g1
