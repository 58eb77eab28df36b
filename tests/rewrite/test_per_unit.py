"""Pass 2, per_unit (dpsql/rewrite/per_unit.py): one row per (unit, group), each measure
aggregated over the unit's rows, the WHERE in FILTER, _hits counting the rows that pass it."""
from __future__ import annotations


def test_per_unit_sql_wraps_the_rows(passes):
    plan = passes.plan("SELECT state, SUM(income) FROM people WHERE age > 30 GROUP BY state")
    rows = passes.sql(plan, "rows")
    assert passes.sql(plan, "per_unit") == (
        "SELECT _u, _g0, SUM(_x0) FILTER(WHERE _h) AS _v0, COUNT(*) FILTER(WHERE _h) AS _hits "
        f"FROM ({rows}) AS _rows GROUP BY _u, _g0")


def test_per_unit_without_where_has_no_filter(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    rows = passes.sql(plan, "rows")
    assert passes.sql(plan, "per_unit") == f"SELECT _u, _g0, SUM(_x0) AS _v0 FROM ({rows}) AS _rows GROUP BY _u, _g0"


def test_per_unit_runs_one_row_per_unit_and_group(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind")
    got = passes.run(passes.sql(plan, "per_unit"))
    assert len({(u, g) for u, g, *_ in got}) == len(got)
    want = passes.run(
        "SELECT person_id, kind, SUM(CAST(LEAST(GREATEST(cost, 0), 2000) * 1000000 AS BIGINT)) FILTER (WHERE cost > 100),"
        " COUNT(*) FILTER (WHERE cost > 100) FROM visits"
        " WHERE kind IN ('checkup', 'lab', 'specialist', 'emergency') GROUP BY person_id, kind")
    assert got == want
    assert any(hits == 0 for *_, hits in got)     # (unit, group)s with no passing row are still formed
