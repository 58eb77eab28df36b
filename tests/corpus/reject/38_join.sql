-- title: A self-join on another column than the unit
-- expect: protected tables can be joined only on equality of their privacy units
SELECT COUNT(*) FROM people AS a JOIN people AS b ON a.household = b.household
