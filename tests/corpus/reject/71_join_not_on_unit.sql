-- title: Two protected tables joined on another column than the unit
-- expect: protected tables can be joined only on equality of their privacy units
SELECT COUNT(*) FROM people p JOIN visits v ON p.household = v.ward
