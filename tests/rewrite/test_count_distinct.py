"""Pass 8, count_distinct (dpsql/rewrite/count_distinct.py): COUNT(DISTINCT col) of a non-unit
column over each unit's bounded values (at most m per unit and group, in at most L0 groups),
joined to the other passes' result on the text keys."""
from __future__ import annotations


def test_count_distinct_sql(passes):
    plan = passes.plan("SELECT state, COUNT(DISTINCT kind) FROM visits GROUP BY state")
    before = passes.sql(plan, "units_only")
    sql = passes.sql(plan, "count_distinct")
    assert sql.startswith(f"SELECT _m._k0, _dc0._d0 FROM ({before}) AS _m LEFT JOIN (SELECT CAST(_g0 AS TEXT) AS _k0, "
                          "COUNT(DISTINCT _dv) AS _d0 FROM (")
    assert "ROW_NUMBER() OVER (PARTITION BY _u, _g0 ORDER BY HASH(_u, _dv, $salt), _dv) AS _r" in sql
    assert "DENSE_RANK() OVER (PARTITION BY _u ORDER BY HASH(_u, _g0, $salt), _g0) AS _rank" in sql
    assert f"WHERE _r <= {plan.rows_per_unit} AND _rank <= {plan.l0} GROUP BY _g0" in sql
    assert sql.endswith(") AS _dc0 ON _m._k0 IS NOT DISTINCT FROM _dc0._k0")


def test_count_distinct_runs_within_the_true_counts(passes):
    plan = passes.plan("SELECT state, COUNT(DISTINCT kind) FROM visits GROUP BY state")
    got = dict(passes.run(passes.sql(plan, "count_distinct")))
    true = dict(passes.run("SELECT CAST(state AS TEXT), COUNT(DISTINCT kind) FROM visits GROUP BY state"))
    assert set(got) <= set(true) and got
    assert all(1 <= got[k] <= true[k] for k in got)


def test_no_distincts_no_join(passes):
    plan = passes.plan("SELECT state, COUNT(*) FROM visits GROUP BY state")
    assert passes.sql(plan, "count_distinct") == passes.sql(plan, "units_only")
