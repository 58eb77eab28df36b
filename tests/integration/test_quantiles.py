"""Quantiles (PERCENTILE_CONT/DISC, MEDIAN, quantile_cont, MIN/MAX) on DuckDB, PostgreSQL and Spark,
against the exact answer on the clamped data: at a huge epsilon the exponential mechanism picks
the bin holding the order statistic nearest the target rank, so the release is within a bin width
or two of it (for integer data, of one of the two order statistics PERCENTILE_CONT interpolates); at
epsilon 1, on 2000 people, the released value's rank is within the reported 95% rank bound.
people has one row per person (the bounding keeps each one's row), so the truth is DuckDB's own
quantile of the clamped column."""
from __future__ import annotations

import pytest

from tests.integration.test_joins import _truth, connect  # noqa: F401 (fixture)

AGE, INCOME = (0, 120), (0, 500000)


def _width(bounds, bins=1024):
    return (bounds[1] - bounds[0]) / bins


CASES = {
    "median_income": ("SELECT MEDIAN(income) AS v FROM people",
                      "SELECT quantile_cont(LEAST(GREATEST(income, 0), 500000), 0.5) FROM people", INCOME),
    "percentile_cont_by_state": (
        "SELECT state, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) AS v, COUNT(*) AS n FROM people "
        "GROUP BY state",
        "SELECT state, quantile_cont(LEAST(GREATEST(age, 0), 120), 0.9), COUNT(*) FROM people GROUP BY state", AGE),
    "quantile_cont": ("SELECT quantile_cont(age, 0.25) AS v FROM people",
                      "SELECT quantile_cont(LEAST(GREATEST(age, 0), 120), 0.25) FROM people", AGE),
    "percentile_disc_desc": (
        "SELECT PERCENTILE_DISC(0.2) WITHIN GROUP (ORDER BY income DESC) AS v FROM people",
        "SELECT quantile_cont(LEAST(GREATEST(income, 0), 500000), 0.8) FROM people", INCOME),
    "min_max": ("SELECT MIN(age) AS lo, MAX(age) AS hi FROM people",
                "SELECT MIN(LEAST(GREATEST(age, 0), 120)), MAX(LEAST(GREATEST(age, 0), 120)) FROM people", AGE),
    "median_expression": ("SELECT MEDIAN(income / 1000) AS v FROM people",
                          "SELECT quantile_cont(LEAST(GREATEST(income, 0), 500000) / 1000, 0.5) FROM people",
                          (0, 500)),
}


@pytest.mark.parametrize("case", CASES)
def test_quantiles_at_a_huge_epsilon_are_within_a_bin_of_the_truth(target, people_db, connect, case):  # noqa: F811
    sql, truth, bounds = CASES[case]
    cur = connect(target).cursor()
    cur.execute(sql)
    got = sorted(cur.fetchall(), key=lambda r: str(r[0]))
    want = sorted(_truth(people_db, truth), key=lambda r: str(r[0]))
    assert len(got) == len(want)
    # integer ages: the interpolated truth lies between two order statistics one year apart, and the
    # mechanism picks the bin of the nearer one
    tol = 2 * _width(bounds) + (1 if bounds == AGE else 0) + 1e-9
    names = [d[0] for d in cur.description]
    for g, w in zip(got, want):
        for name, a, b in zip(names, g, w):
            if isinstance(b, str):
                assert a == b
            elif name == "n":            # a COUNT beside the quantile
                assert a == pytest.approx(b, abs=1)
            else:
                assert bounds[0] <= a <= bounds[1] and a == pytest.approx(float(b), abs=tol), (g, w)


def test_quantile_accuracy_at_epsilon_one_is_within_the_reported_rank_bound(target, people_db, connect):  # noqa: F811
    c = connect(target)
    cur = c.cursor()
    cur.execute("SET dpsql.epsilon = 1")
    ages = sorted(min(max(r[0], 0), 120) for r in _truth(people_db, "SELECT age FROM people WHERE age IS NOT NULL"))
    n = len(ages)
    misses = 0
    for _ in range(5):
        cur.execute("SELECT MEDIAN(age) AS m FROM people")
        (v,), = cur.fetchall()
        acc = cur.accuracy[0]
        assert acc.mechanism == "exponential" and acc.ci95 > 0 and cur.half_widths[0] == (None,)
        below = sum(a < v - _width(AGE) for a in ages)
        above = sum(a > v + _width(AGE) for a in ages)
        # v's rank (up to a bin) is within ci95 ranks of q * (n - 1)
        misses += not (below <= 0.5 * (n - 1) + acc.ci95 and n - above >= 0.5 * (n - 1) - acc.ci95)
    assert misses <= 2      # each miss has probability <= 5%


def test_explain_dp_states_the_rank_bound(target, connect):  # noqa: F811
    cur = connect(target).cursor()
    cur.execute("EXPLAIN DP SELECT state, MEDIAN(income) AS m, COUNT(*) AS n FROM people GROUP BY state")
    text = " ".join(" ".join(str(v) for v in r if v is not None) for r in cur.fetchall())
    assert "MEDIAN" in text and "exponential" in text and "1024 bins" in text and "rank is within" in text


def test_visits_quantile_is_bounded_per_person(target, people_db, connect):  # noqa: F811
    """visits: at most 5 rows per person and group, 2 groups per person, with a WHERE: runs and stays
    in range on every engine (the salted per-unit choice and the rank of groups)."""
    cur = connect(target).cursor()
    cur.execute("SELECT kind, MEDIAN(cost) AS m, MAX(cost) AS hi FROM visits WHERE cost > 10 GROUP BY kind")
    rows = cur.fetchall()
    assert {r[0] for r in rows} == {"checkup", "lab", "specialist", "emergency"}
    for _, m, hi in rows:
        assert 0 <= m <= 2000 and 0 <= hi <= 2000


def test_histogram_matches_the_bounded_truth_on_duckdb(people_db, connect):  # noqa: F811
    """The engine's histogram is the per-unit-bounded one: for people (one row each) exactly the
    counts of the clamped values in each bin."""
    c = connect(people_db)
    plan = c.session.plan("SELECT MEDIAN(age) AS m FROM people")
    from dpsql.noise.exponential import parse_histogram
    from dpsql.rewrite import to_sql
    rows = c.session.engine.run(to_sql(plan, "duckdb"), {"salt": 1}).rows
    got = parse_histogram(rows[0][-1])
    want = [0] * 1024
    for (a,) in _truth(people_db, "SELECT age FROM people WHERE age IS NOT NULL"):
        a = min(max(a, 0), 120)
        want[min(int(a / 120 * 1024), 1023)] += 1
    assert got == want


def test_count_distinct_column_is_the_bounded_distinct_count(target, people_db, connect):  # noqa: F811
    """people: one row per person, so the bounded count is the exact distinct count."""
    cur = connect(target).cursor()
    cur.execute("SELECT sex, COUNT(DISTINCT age) AS a, COUNT(DISTINCT income) AS i FROM people WHERE age > 30 "
                "GROUP BY sex")
    got = sorted(cur.fetchall())
    want = _truth(people_db, "SELECT sex, COUNT(DISTINCT age), COUNT(DISTINCT income) FROM people WHERE age > 30 "
                             "GROUP BY sex")
    assert len(got) == len(want)
    for (s, a, i), (ws, wa, wi) in zip(got, want):
        assert s == ws and a == pytest.approx(wa, abs=0.5) and i == pytest.approx(wi, abs=0.5)


def test_count_distinct_column_on_visits_is_at_most_the_distinct_count(target, people_db, connect):  # noqa: F811
    cur = connect(target).cursor()
    cur.execute("SELECT kind, COUNT(DISTINCT state) AS n, MEDIAN(cost) AS m FROM visits GROUP BY kind")
    exact = dict(_truth(people_db, "SELECT kind, COUNT(DISTINCT state) FROM visits GROUP BY kind"))
    for kind, n, m in cur.fetchall():
        assert n <= exact[kind] + 0.5 and n >= exact[kind] - 1.5 and 0 <= m <= 2000
