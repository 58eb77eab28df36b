"""The quantile aggregates in the analysis (dpsql.analysis.quantiles): accepted spellings, q,
DESC, shared histograms, epsilon split and noise specs, refusals."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.analysis.analyze import analyze
from dpsql.analysis.parse import classify
from dpsql.errors import QueryRejected
from tests.rewrite.test_golden import SCHEMA, SETTINGS, _policy


def plan(sql: str):
    return analyze(classify(sql).tree, _policy("demo"), SCHEMA, SETTINGS, "duckdb")


@pytest.mark.parametrize("sql, q", [
    ("SELECT MEDIAN(income) FROM people", Fraction(1, 2)),
    ("SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) FROM people", Fraction(9, 10)),
    ("SELECT PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY income DESC) FROM people", Fraction(1, 10)),
    ("SELECT quantile_cont(income, 0.25) FROM people", Fraction(1, 4)),
    ("SELECT quantile_disc(income, .75) FROM people", Fraction(3, 4)),
    ("SELECT MIN(income) FROM people", Fraction(0)),
    ("SELECT MAX(income) FROM people", Fraction(1)),
])
def test_spellings(sql, q):
    p = plan(sql)
    assert len(p.quantiles) == 1 and not p.measures
    qq = p.quantiles[0]
    assert qq.q == q and (qq.lo, qq.hi) == (0, 500000) and qq.bins == 1024
    spec, = p.noise
    assert spec.mechanism == "exponential" and spec.epsilon == SETTINGS.epsilon and spec.delta == 0


def test_shared_histogram_and_epsilon_split():
    p = plan("SELECT kind, MEDIAN(cost) AS m, MAX(cost) AS hi, MEDIAN(cost) AS again, COUNT(*) AS n "
             "FROM visits GROUP BY kind")
    assert [q.q for q in p.quantiles] == [Fraction(1, 2), Fraction(1)]
    assert len({q.hist for q in p.quantiles}) == 1          # one histogram of cost serves both
    assert len(p.noise) == 3 and all(s.epsilon == pytest.approx(1 / 3) for s in p.noise)
    q = next(s for s in p.noise if s.mechanism == "exponential")
    assert q.linf == 5 and p.l0 == 2                      # visits: 5 rows and 2 groups per person
    assert p.outputs[1].expr == p.outputs[3].expr


def test_quantile_of_a_derived_expression_and_in_having():
    p = plan("SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING MEDIAN(income / 1000) > 20")
    q, = p.quantiles
    assert (q.lo, q.hi) == (0, 500) and q.derived


@pytest.mark.parametrize("sql", [
    "SELECT MEDIAN(state) FROM people",                                   # not numeric
    "SELECT PERCENTILE_CONT(1.5) WITHIN GROUP (ORDER BY income) FROM people",
    "SELECT PERCENTILE_CONT(age) WITHIN GROUP (ORDER BY income) FROM people",
    "SELECT quantile_cont(income) FROM people",
    "SELECT MEDIAN(income) FILTER (WHERE age > 3) FROM people",
    "SELECT MIN(DISTINCT income) FROM people",
    "SELECT MEDIAN(person_id) FROM people",                               # undeclared bounds (the unit)
])
def test_refusals(sql):
    with pytest.raises(QueryRejected):
        plan(sql)
