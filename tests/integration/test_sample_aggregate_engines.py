"""Sample-and-aggregate answered on DuckDB, PostgreSQL and Spark (dpsql.analysis.sample_aggregate):
at a huge epsilon the released block mean is near the exact answer on the clamped data (the
block means differ from it only by the estimator's own sampling error: k = 8 blocks of about
250 people), every released value lies in its range, and a policy without [functions] refuses."""
from __future__ import annotations

import pytest

from dpsql.errors import QueryRejected
from tests.integration.test_joins import _truth, connect  # noqa: F401 (fixture)

FUNCTIONS = {"sample_aggregate": ["corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept"], "blocks": 8,
             "regr_slope": {"lower": -10000, "upper": 10000}, "regr_intercept": {"lower": -1e6, "upper": 1e6}}
CLAMP = "LEAST(GREATEST(age, 0), 120), LEAST(GREATEST(income, 0), 500000)"

CASES = {
    "corr": ("SELECT CORR(age, income) AS c FROM people", f"SELECT CORR({CLAMP}) FROM people", 0.15),
    "covar": ("SELECT COVAR_POP(age, income) AS c FROM people", f"SELECT COVAR_POP({CLAMP}) FROM people", 1.5e5),
    "slope": ("SELECT REGR_SLOPE(income, age) AS s FROM people",
              "SELECT REGR_SLOPE(LEAST(GREATEST(income, 0), 500000), LEAST(GREATEST(age, 0), 120)) FROM people",
              150.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sample_aggregate_near_the_exact_answer(target, people_db, connect, case):  # noqa: F811
    sql, truth, tol = CASES[case]
    cur = connect(target, functions=FUNCTIONS).cursor()
    cur.execute(sql)
    (got,), (hw,) = cur.fetchone(), cur.half_widths[0]
    (want,), = _truth(people_db, truth)
    assert abs(got - want) <= tol + 10 * hw, (got, want, hw)
    assert hw is not None and hw < tol


def test_sample_aggregate_grouped_with_where_and_filter(target, people_db, connect):  # noqa: F811
    cur = connect(target, functions=FUNCTIONS).cursor()
    cur.execute("SELECT state, CORR(age, income) FILTER (WHERE sex = 'F') AS c FROM people "
                "WHERE age >= 18 GROUP BY state ORDER BY state")
    rows = cur.fetchall()
    states = [s for s, in _truth(people_db, "SELECT DISTINCT state FROM people")]
    assert sorted(s for s, _ in rows) == sorted(states)      # a public domain: every state
    assert all(-1 <= c <= 1 for _, c in rows)


def test_sample_aggregate_needs_the_policy(target, connect):  # noqa: F811
    cur = connect(target).cursor()
    with pytest.raises(QueryRejected, match="sample-and-aggregate"):
        cur.execute("SELECT CORR(age, income) FROM people")


def test_sample_aggregate_with_partition_selection(target, connect):  # noqa: F811
    cur = connect(target, functions=FUNCTIONS).cursor()
    cur.execute("SELECT v.visit_date, CORR(v.cost, p.age) AS c FROM visits v JOIN people p "
                "ON v.person_id = p.person_id GROUP BY v.visit_date")
    rows = cur.fetchall()
    assert rows and all(-1 <= c <= 1 for _, c in rows)
    cur.execute("EXPLAIN DP (WIDE) SELECT v.visit_date, CORR(v.cost, p.age) AS c FROM visits v JOIN people p "
                "ON v.person_id = p.person_id GROUP BY v.visit_date")
    assert any(r[0] == "partition_selection" for r in cur.fetchall())


# -- sample-and-aggregate beside other aggregates (dpsql.rewrite.sample_aggregate.combined)

MIXED = ("SELECT state, COUNT(*) AS n, AVG(income) AS a, CORR(age, income) AS c, "
         "COVAR_POP(age, income) AS v FROM people GROUP BY state")
MIXED_TRUTH = (f"SELECT state, COUNT(*), AVG(LEAST(GREATEST(income, 0), 500000)), CORR({CLAMP}), COVAR_POP({CLAMP}) "
               "FROM people GROUP BY state")


def test_mixed_grouped_near_the_exact_answer(target, people_db, connect):  # noqa: F811
    """COUNT and AVG (exact bounded truth: one row per person, one group each) within 10 half-widths,
    CORR and COVAR_POP within the block estimator's sampling error (k = 8 blocks of about 30 people
    per state: loose) plus 10 half-widths; every state of the public domain released."""
    cur = connect(target, functions=FUNCTIONS).cursor()
    cur.execute(MIXED)
    rows = sorted(zip(cur.fetchall(), cur.half_widths))
    want = {r[0]: r[1:] for r in _truth(people_db, MIXED_TRUTH)}
    assert [r[0] for r, _ in rows] == sorted(want)
    assert [d[0] for d in cur.description] == ["state", "n", "a", "c", "v"]
    for (state, n, a, c, v), (_, hn, ha, hc, hv) in rows:
        wn, wa, wc, wv = want[state]
        assert all(h is not None for h in (hn, ha, hc, hv))
        assert abs(n - wn) <= 10 * hn + 1e-9 and abs(a - wa) <= 10 * ha + 1e-6 * abs(wa)
        assert -1 <= c <= 1 and abs(c - wc) <= 0.6 + 10 * hc, (state, c, wc, hc)
        assert abs(v) <= 120 * 500000 / 4 and abs(v - wv) <= 6e5 + 10 * hv, (state, v, wv, hv)
    key, *acc = cur.accuracy
    assert key is None and all(a.mechanism == "laplace" and a.ci95 is not None for a in acc)
    assert acc[0].noise_scale and acc[2].noise_scale and acc[3].noise_scale    # one noisy value each


def test_mixed_ungrouped_with_where_and_filter(target, people_db, connect):  # noqa: F811
    cur = connect(target, functions=FUNCTIONS).cursor()
    cur.execute("SELECT COUNT(*) AS n, SUM(income) FILTER (WHERE sex = 'F') AS s, "
                "CORR(age, income) FILTER (WHERE sex = 'F') AS c FROM people WHERE age >= 18")
    (n, s, c), = cur.fetchall()
    (hn, hs, hc), = cur.half_widths
    (wn, ws, wc), = _truth(people_db, "SELECT COUNT(*), SUM(LEAST(GREATEST(income, 0), 500000)) FILTER (WHERE sex = 'F'), "
                                      f"CORR({CLAMP}) FILTER (WHERE sex = 'F') FROM people WHERE age >= 18")
    assert abs(n - wn) <= 10 * hn + 1e-9 and abs(s - ws) <= 10 * hs + 1e-6 * abs(ws)
    assert abs(c - wc) <= 0.15 + 10 * hc, (c, wc, hc)


def test_mixed_with_partition_selection(target, people_db, connect):  # noqa: F811
    """Keys without a public domain: selection once for the query, on the ordinary part's units;
    the released dates are among the true ones, each with its count and a correlation in range."""
    cur = connect(target, functions=FUNCTIONS).cursor()
    sql = ("SELECT v.visit_date, COUNT(*) AS n, CORR(v.cost, p.age) AS c FROM visits v JOIN people p "
           "ON v.person_id = p.person_id GROUP BY v.visit_date")
    cur.execute(sql)
    rows = cur.fetchall()
    dates = {str(d) for d, in _truth(people_db, "SELECT DISTINCT visit_date FROM visits")}
    assert rows and all(str(d) in dates and n > 0 and -1 <= c <= 1 for d, n, c in rows)
    cur.execute("EXPLAIN DP (WIDE) " + sql)
    plan = cur.fetchall()
    assert sum(1 for r in plan if r[0] == "partition_selection") == 1


def test_mixed_under_zcdp_the_rho_parts_add(people_db, tmp_path):
    """zCDP (DuckDB; the accounting does not depend on the engine): a mixed query is charged the sum of
    its measures' rho, block measures included, with partition selection's part; SET dpsql.rho
    calibrates the whole query to it, split evenly."""
    import dpsql
    from tests.integration.test_zcdp import explain, zpolicy
    pol = zpolicy(tmp_path)
    pol["functions"] = FUNCTIONS
    sql = ("SELECT v.visit_date, COUNT(*) AS n, CORR(v.cost, p.age) AS c FROM visits v JOIN people p "
           "ON v.person_id = p.person_id GROUP BY v.visit_date")
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        for query in (MIXED, sql):
            rows = explain(cur, query)
            values = [r for r in rows if r["item"] == "value"]
            parts = [r["rho"] for r in rows if r["item"] in ("value", "partition_selection")]
            [charge] = [r for r in rows if r["item"] == "charge"]
            assert len(values) == (5 if query is MIXED else 2)     # AVG is two sums
            assert all(r["mechanism"] == "gaussian" and r["epsilon"] == pytest.approx(0.5 / len(parts))
                       for r in values)
            assert charge["rho"] == pytest.approx(sum(parts), rel=1e-9)
        cur.execute("SET dpsql.rho = 0.01")
        rows = explain(cur, MIXED)
        [charge] = [r for r in rows if r["item"] == "charge"]
        parts = [r["rho"] for r in rows if r["item"] == "value"]
        assert 0.01 * (1 - 1e-6) <= charge["rho"] <= 0.01 and sum(parts) == pytest.approx(charge["rho"])
        assert max(parts) == pytest.approx(min(parts), rel=1e-6)
        before = conn.session.spending().rho_spent
        cur.execute(MIXED)
        assert len(cur.fetchall()) == 8
        assert conn.session.spending().rho_spent - before == pytest.approx(0.01, rel=1e-6)
