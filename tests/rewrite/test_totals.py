"""Pass 4, totals (dpsql/rewrite/totals.py): per group, the sum of each unit's contribution clamped
to the per-group bound, over the unit's chosen groups (rank <= L0) with a passing row."""
from __future__ import annotations

from collections import defaultdict


def test_totals_sql(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    m, hi, scale = plan.rows_per_unit, 2000, 1000000
    assert (m, plan.l0) == (5, 2)
    cap = m * hi * scale
    assert passes.sql(plan, "totals") == (
        f"SELECT _g0, SUM(CASE WHEN _v0 < 0 THEN 0 WHEN _v0 > {cap} THEN {cap} ELSE _v0 END) AS _v0 "
        f"FROM ({passes.sql(plan, 'group_choice')}) AS _per_unit WHERE _rank <= 2 GROUP BY _g0")


def test_totals_sql_with_where_and_counts(passes):
    plan = passes.plan("SELECT kind, COUNT(*) FROM visits WHERE cost > 100 GROUP BY kind")
    sql = passes.sql(plan, "totals")
    assert sql.startswith("SELECT _g0, SUM(LEAST(_v0, 5)) AS _v0 FROM (")
    assert sql.endswith(") AS _per_unit WHERE _rank <= 2 AND _hits > 0 GROUP BY _g0")


def test_totals_run_as_documented(passes):
    """The totals equal the per-unit rows summed by hand: rank <= L0, a passing row, clamped."""
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind")
    cap = plan.rows_per_unit * 2000 * 1000000
    want = defaultdict(int)
    for u, g, v, hits, rank in passes.run(passes.sql(plan, "group_choice")):
        if rank <= plan.l0 and hits > 0:
            want[g] += min(max(v or 0, 0), cap)
    got = passes.run(passes.sql(plan, "totals"))
    assert got == sorted(want.items(), key=repr)


def test_units_column_for_partition_selection(passes):
    plan = passes.plan("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
    assert plan.selection is not None
    sql = passes.sql(plan, "totals")
    assert ", COUNT(*) AS _units FROM (" in sql
    assert passes.columns(sql) == ["_g0", "_v0", "_units"]
