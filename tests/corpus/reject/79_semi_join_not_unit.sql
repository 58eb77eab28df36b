-- title: IN (SELECT ...) testing another column than the unit
-- expect: it must test the outer query's privacy unit
SELECT COUNT(*) FROM people p WHERE p.age IN (SELECT v.ward FROM visits v)
