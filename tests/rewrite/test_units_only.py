"""Pass 7, units_only (dpsql/rewrite/units_only.py): counting units when every measure is COUNT(*)
and each unit's per-group count is clamped to 1: COUNT(DISTINCT _u), or the unit's arg-min group."""
from __future__ import annotations


def test_count_distinct_units_without_group_choice(passes):
    plan = passes.plan("SELECT COUNT(*) FROM people")
    assert plan.units_only and not plan.group_choice
    rows = passes.sql(plan, "rows")
    assert passes.sql(plan, "units_only") == f"SELECT COUNT(DISTINCT _u) AS _v0 FROM ({rows}) AS _rows"
    assert passes.run(passes.sql(plan, "units_only")) == passes.run(passes.sql(plan, "keys_as_text"))


def test_arg_min_with_one_group_per_unit(passes):
    plan = passes.plan("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert plan.units_only and plan.group_choice and plan.l0 == 1
    rows = passes.sql(plan, "rows")
    sql = passes.sql(plan, "units_only")
    assert sql == ("SELECT CAST(_g0 AS TEXT) AS _k0, COUNT(*) AS _v0 FROM (SELECT ARG_MIN(_g0, HASH(_u, _g0, $salt)) "
                   f"AS _g0 FROM ({rows}) AS _rows GROUP BY _u) AS _per_unit GROUP BY _g0")
    assert passes.run(sql) == passes.run(passes.sql(plan, "keys_as_text"))


def test_distinct_on_for_postgres(passes):
    plan = passes.plan("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert "DISTINCT ON (_u)" in passes.sql(plan, "units_only", "postgres")
    assert "MIN_BY(" in passes.sql(plan, "units_only", "spark")


def test_other_plans_are_left_alone(passes):
    plan = passes.plan("SELECT kind, COUNT(*) FROM visits GROUP BY kind")     # 5 rows per unit counted
    assert not plan.units_only
    assert passes.sql(plan, "units_only") == passes.sql(plan, "keys_as_text")
