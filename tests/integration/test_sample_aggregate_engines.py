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
