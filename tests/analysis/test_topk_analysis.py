"""SET dpsql.topk = 'noisy_max' in the analysis (dpsql.analysis.topk) and its mechanism
(dpsql.noise.topk): accepted shapes and their specs, refused shapes with their reasons, the budget
split, and the charge against the histogram's for the same epsilon."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.analysis.analyze import Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.analysis.topk import TARGET, applies, plan_topk
from dpsql.errors import QueryRejected
from dpsql.noise import make_mechanism
from dpsql.noise.topk import NoisyTopK
from dpsql.rewrite import to_sql
from tests.rewrite.test_golden import SCHEMA, SETTINGS, _policy

REGIONS = ("East", "South", "West")


def domains(table: str, column: str) -> tuple:
    assert (table, column) == ("regions", "region")
    return REGIONS


def base(sql: str, settings: Settings = SETTINGS):
    return analyze(classify(sql).tree, _policy("demo"), SCHEMA, settings, "duckdb", domains)


def top(sql: str, settings: Settings = SETTINGS):
    p = base(sql, settings)
    assert applies(p)
    return plan_topk(p, settings.epsilon, settings.delta, settings.mechanism)


def selection(p):
    return next(s for s in p.noise if s.target == TARGET)


def test_count_with_value_splits_epsilon_and_scores_by_the_per_group_bound():
    p = top("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 3")
    t = p.topk
    assert (t.k, t.desc, t.monotone, t.values, t.candidates) == (3, True, True, True, 8)
    assert t.sensitivity == 5 and p.l0 == 2           # visits: 5 rows, 2 groups per person
    s = selection(p)
    assert s.mechanism == "noisy_max" and s.epsilon == 0.5 and s.linf == 5 and s.delta == 0
    v = next(s for s in p.noise if s.target == p.measures[0].name)
    # the value on the 3 selected keys: one person touches min(3, 2) of them, 5 each
    assert v.mechanism == "laplace" and v.epsilon == 0.5 and v.l1 == 10
    assert p.cost.epsilon == 1.0 and p.cost.delta == 0
    # the engine query is the ordinary per-unit-bounded one, unchanged
    assert to_sql(p, "duckdb") == to_sql(base("SELECT state, COUNT(*) AS n FROM visits GROUP BY state "
                                              "ORDER BY n DESC LIMIT 3"), "duckdb")


def test_keys_only_gives_the_whole_epsilon_to_the_selection():
    p = top("SELECT state FROM visits GROUP BY state ORDER BY COUNT(*) DESC LIMIT 2")
    assert not p.topk.values and [s.target for s in p.noise] == [TARGET]
    assert selection(p).epsilon == 1.0 and p.cost.delta == 0


@pytest.mark.parametrize("sql, monotone, linf", [
    ("SELECT state, SUM(cost) AS s FROM visits GROUP BY state ORDER BY s DESC LIMIT 2", True, 5 * 2000),
    # bounds straddling 0 (a derived expression): scores may move in opposite directions
    ("SELECT state, SUM(cost - 1000) AS s FROM visits GROUP BY state ORDER BY s DESC LIMIT 2", False, 5 * 1000),
    # bottom-k of a count: still monotone (every score moves the same way)
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n ASC LIMIT 2", True, 5),
])
def test_sum_monotonicity(sql, monotone, linf):
    t = top(sql).topk
    assert t.monotone is monotone and t.sensitivity == linf


def test_public_table_and_derived_domains():
    p = top("SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state "
            "GROUP BY r.region ORDER BY n DESC LIMIT 2")
    assert p.topk.candidates == len(REGIONS) and p.topk.sensitivity == 1     # people: one row per person
    p = top("SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS g, COUNT(*) AS n FROM people "
            "GROUP BY 1 ORDER BY n DESC LIMIT 1")
    assert p.topk.k == 1 and p.topk.candidates >= 2


@pytest.mark.parametrize("sql, reason", [
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age ORDER BY n DESC LIMIT 2", "public domain"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 2 OFFSET 1", "OFFSET"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state HAVING COUNT(*) > 3 ORDER BY n DESC LIMIT 2",
     "HAVING"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC, state LIMIT 2", "more than one item"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n * 2 DESC LIMIT 2", "an expression"),
    ("SELECT state, COUNT(*) AS n, SUM(cost) AS s FROM visits GROUP BY state ORDER BY n DESC LIMIT 2",
     "more than one aggregate"),
    ("SELECT state, AVG(cost) AS a FROM visits GROUP BY state ORDER BY a DESC LIMIT 2", "more than one aggregate"),
    ("SELECT state, MEDIAN(cost) AS m FROM visits GROUP BY state ORDER BY m DESC LIMIT 2", "more than one aggregate"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 9", "larger than the public"),
    ("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 0", "nothing to select"),
    ("SELECT * FROM (SELECT state, COUNT(*) AS n FROM visits GROUP BY state) t ORDER BY n DESC LIMIT 3",
     "outer query"),
])
def test_refused_shapes_say_why(sql, reason):
    p = base(sql)
    assert applies(p)
    with pytest.raises(QueryRejected) as err:
        plan_topk(p, 1.0, 1e-8, "laplace")
    assert reason in str(err.value) and "top-k" in str(err.value)


def test_k_times_a_large_domain_is_refused():
    """A public table with 50,000 regions: 2 x 50,000 is at the cap, 3 x 50,000 above it."""
    many = tuple(f"r{i:05d}" for i in range(50_000))
    sql = ("SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state "
           "GROUP BY r.region ORDER BY n DESC LIMIT {}")

    def plan(k):
        return analyze(classify(sql.format(k)).tree, _policy("demo"), SCHEMA, SETTINGS, "duckdb",
                       lambda table, column: many)
    assert plan_topk(plan(2), 1.0, 0.0, "laplace").topk.candidates == 50_000
    with pytest.raises(QueryRejected, match="too slow"):
        plan_topk(plan(3), 1.0, 0.0, "laplace")


@pytest.mark.parametrize("sql", [
    "SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC",      # no LIMIT: nothing to select
    "SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY state LIMIT 3",   # keys only
    "SELECT COUNT(*) AS n FROM visits ORDER BY n DESC LIMIT 1",                     # no GROUP BY
    "SELECT * FROM (SELECT state, COUNT(*) AS n FROM visits GROUP BY state) t LIMIT 3",   # a BI tool's cut
])
def test_not_a_top_k(sql):
    assert not applies(base(sql))


def test_gaussian_values_take_the_delta():
    s = Settings(1.0, 1e-6, "gaussian")
    p = top("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 3", s)
    v = next(x for x in p.noise if x.target != TARGET)
    assert v.mechanism == "gaussian" and v.delta == 1e-6 and p.cost.delta == 1e-6
    p = top("SELECT state FROM visits GROUP BY state ORDER BY COUNT(*) DESC LIMIT 3", s)
    assert p.cost.delta == 0       # nothing Gaussian is released


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_selection_costs_less_than_the_histogram(k):
    """visits: a person may touch L0 = 2 groups. At the same epsilon the histogram's Laplace needs
    L1 = 2 x 5 (scale 10/eps) and costs rho = eps^2/2; the selection's scores have sensitivity 5 (not
    2 x 5), its temperature is 5k/eps and it costs rho = eps^2/(8k)."""
    eps = 1.0
    hist = base("SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC")
    spec, = hist.noise
    assert hist.l0 == 2 and spec.l1 == 10
    hist_mech = make_mechanism(spec.mechanism, spec.sensitivity, spec.epsilon)
    p = top(f"SELECT state FROM visits GROUP BY state ORDER BY COUNT(*) DESC LIMIT {k}")
    t = p.topk
    sel = NoisyTopK(t.epsilon, t.k, t.sensitivity, t.monotone, t.candidates)
    assert sel.rho == Fraction(eps) ** 2 / (8 * k) < hist_mech.rho == Fraction(1, 2)
    assert selection(p).linf == 5 < spec.l1
    # per score, the selection's noise (Gumbel scale Delta*k/eps) vs the histogram's Laplace scale L0*Delta/eps
    assert sel.scale == pytest.approx(5 * k / eps) and hist_mech.scale >= 10 / eps
    if k < hist.l0:
        assert sel.scale < hist_mech.scale


def test_mechanism_parameters_and_exact_rho():
    m = NoisyTopK(0.9, 3, Fraction(2), False, 10)
    assert m.eps_step == Fraction(0.9) / 3 and m.scale == pytest.approx(2 * 2 * 3 / 0.9)
    assert m.rho == 3 * (Fraction(0.9) / 3) ** 2 / 8
    assert m.params()["k"] == 3 and m.params()["monotone"] is False
    with pytest.raises(Exception):
        NoisyTopK(1.0, 11, Fraction(1), True, 10)
    with pytest.raises(Exception):
        NoisyTopK(1.0, 1, Fraction(0), True, 10)
