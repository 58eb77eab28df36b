"""Pass 6, unique_unit (dpsql/rewrite/unique_unit.py): when the relation proves one row per unit
(people_pk's PRIMARY KEY), the per-unit level is skipped: rows clipped and aggregated per group."""
from __future__ import annotations

DOMAIN = "('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')"


def test_shortcut_sql(passes):
    plan = passes.plan("SELECT state, SUM(income) FROM people_pk WHERE age > 30 GROUP BY state")
    assert plan.bounded is False
    assert passes.sql(plan, "unique_unit") == (
        "SELECT CAST(_g0 AS TEXT) AS _k0, SUM(_x0) FILTER(WHERE _h) AS _v0 FROM (SELECT people_pk.person_id AS _u, "
        "people_pk.state AS _g0, CASE WHEN (people_pk.age > 30) THEN CAST(CASE WHEN people_pk.income < 0 THEN 0 "
        "WHEN people_pk.income > 500000 THEN 500000 ELSE people_pk.income END * 1000000 AS BIGINT) END AS _x0, "
        "(people_pk.age > 30) AS _h FROM people_pk AS people_pk) "
        f"AS _rows GROUP BY _g0 HAVING CASE WHEN _g0 IN {DOMAIN} THEN TRUE ELSE FALSE END")


def test_shortcut_gives_the_general_rewrite_result(passes):
    for sql in ("SELECT state, SUM(income) FROM people_pk WHERE age > 30 GROUP BY state",
                "SELECT sex, AVG(age) FROM people_pk GROUP BY sex"):
        plan = passes.plan(sql)
        assert passes.run(passes.sql(plan, "unique_unit")) == passes.run(passes.sql(plan, "keys_as_text")), sql


def test_bounded_plans_are_left_alone(passes):
    plan = passes.plan("SELECT state, SUM(income) FROM people GROUP BY state")
    assert plan.bounded is True
    assert passes.sql(plan, "unique_unit") == passes.sql(plan, "keys_as_text")
