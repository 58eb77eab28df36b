"""Neighbouring-dataset tests for the quantiles (dpsql.noise.exponential, dpsql.rewrite.quantiles) and
COUNT(DISTINCT col) of a non-unit column (dpsql.analysis.distinct, dpsql.rewrite.count_distinct),
on the datasets of tests/stats/test_neighbours.py: D holds unit X (7 rows in 3 states, values far
beyond the bounds), D' is D without X. For each shape the shipped release path (plan, rewrite, engine
run per salt, dpsql.release.release) releases the query many times on D and on D', and the checker of
test_neighbours tests P_D(E) <= e^eps P_D'(E) (and the reverse) on pilot-placed bins and half-lines
of the released quantile, at the quantile's own epsilon share (plan.noise).

False failures: one-sided Clopper-Pearson bounds at ALPHA each, Bonferroni over the MAX_EVENTS
events of this file: a correct implementation fails it with probability <= 4 * MAX_EVENTS * ALPHA
= 5e-5 < 1e-4. The releases are seeded (SeededRng, fixed salts): the run is deterministic.

test_histogram_sensitivity checks, without noise and for each salt, the bound the argument rests on:
X moves each group's histogram by at most max_rows_per_unit rows (L1) and touches at most L0 groups,
and reaches the bound (the data exercise the worst case); test_distinct_sensitivity the same for the
distinct count (each group's count moves by at most max_rows_per_unit).
"""
from __future__ import annotations

import pytest

from dpsql.noise.exponential import parse_histogram
from dpsql.release import mechanisms_for
from dpsql.rewrite import SALT, to_sql
from dpsql.rewrite.quantiles import histograms, needs_salt
from tests.stats.test_neighbours import (  # noqa: F401 (fixtures)
    Releases,
    Shape,
    Target,
    _check_shape,
    _n_events,
    _salts,
    _seed,
    databases,
    open_session,
)

pytestmark = pytest.mark.stats

N = 4000
FALSE_FAILURE_BUDGET = 5e-5
MAX_EVENTS = 200
ALPHA = FALSE_FAILURE_BUDGET / (4 * MAX_EVENTS)

SHAPES = {
    "median": Shape("SELECT MEDIAN(age) AS m FROM people", (Target("value", "m"),)),
    "group_percentile": Shape(
        "SELECT state, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) AS p, COUNT(*) AS n FROM people "
        "GROUP BY state", (Target("value", "p", "CA"), Target("value", "p", "NY"))),
    "max_where": Shape("SELECT MAX(age) AS hi FROM trips WHERE age >= 18", (Target("value", "hi"),)),
    # COUNT(DISTINCT col) of a non-unit column (dpsql.analysis.distinct): X brings incomes of its own (2 in NY)
    "count_distinct": Shape("SELECT state, COUNT(DISTINCT income) AS n FROM people GROUP BY state",
                            (Target("value", "n", "NY"), Target("total", "n"))),
}


def test_event_budget():
    assert sum(_n_events(t) for s in SHAPES.values() for t in s.targets) <= MAX_EVENTS
    assert 4 * MAX_EVENTS * ALPHA <= FALSE_FAILURE_BUDGET < 1e-4


class QuantileReleases(Releases):
    """Releases, with the salt bound whenever the histogram's per-unit choice uses it."""

    def __init__(self, session, sql: str, salts: list[int]):
        self.session = session
        self.plan = session.plan(sql)
        text = to_sql(self.plan, session.engine.dialect)
        self.mechs, self.sel = mechanisms_for(self.plan)
        salts = salts if self.plan.group_choice or needs_salt(self.plan) else [None]
        self.rows = [session.engine.run(text, {SALT: s} if s is not None else None).rows for s in salts]


@pytest.mark.parametrize("name", SHAPES)
def test_quantile_dp_inequality(name, databases, open_session):  # noqa: F811
    shape, seed = SHAPES[name], _seed("quantile-" + name)
    salts = _salts(seed)
    a = QuantileReleases(open_session(databases["D"], seed, shape), shape.sql, salts)
    b = QuantileReleases(open_session(databases["D'"], seed + 7, shape), shape.sql, salts)
    bad, tested = _check_shape(a, b, shape.targets, seed, n=N, alpha=ALPHA)
    assert tested <= MAX_EVENTS
    assert not bad, "\n".join(bad)


def test_checker_detects_a_broken_quantile(databases, open_session):  # noqa: F811
    """The same check fails when the mechanism ignores the rank sensitivity (epsilon x 20): the test
    has power."""
    from dataclasses import replace
    shape, seed = SHAPES["max_where"], _seed("quantile-broken")
    salts = _salts(seed)
    a = QuantileReleases(open_session(databases["D"], seed, shape), shape.sql, salts)
    b = QuantileReleases(open_session(databases["D'"], seed + 7, shape), shape.sql, salts)
    broken = {k: replace(m, epsilon=m.epsilon * 20) for k, m in a.mechs.items()}
    a.mechs = b.mechs = broken
    bad, _ = _check_shape(a, b, shape.targets, seed, n=1500, alpha=ALPHA)
    assert bad


@pytest.mark.parametrize("name", ["median", "group_percentile", "max_where"])
def test_histogram_sensitivity(name, databases, open_session):  # noqa: F811
    shape, seed = SHAPES[name], _seed("quantile-sens-" + name)
    sa, sb = open_session(databases["D"], seed, shape), open_session(databases["D'"], seed, shape)
    plan = sa.plan(shape.sql)
    rows_per_unit = plan.rows_per_unit
    reached = False
    for salt in _salts(seed)[:6]:
        ra = _hists(sa, shape.sql, salt)
        rb = _hists(sb, shape.sql, salt)
        touched = 0
        for key in set(ra) | set(rb):
            ha, hb = ra.get(key, [0] * 1024), rb.get(key, [0] * 1024)
            moved = sum(abs(x - y) for x, y in zip(ha, hb))
            assert moved <= rows_per_unit, (key, moved)
            touched += moved > 0
            reached |= moved == rows_per_unit
        assert touched <= plan.l0
    assert reached


def _hists(session, sql: str, salt: int) -> dict:
    plan = session.plan(sql)
    rows = session.engine.run(to_sql(plan, session.engine.dialect), {SALT: salt}).rows
    nk = len(plan.keys)
    col = len(rows[0]) - len(histograms(plan)) if rows else 0
    return {tuple(r[:nk]): parse_histogram(r[col]) for r in rows}



def test_distinct_sensitivity(databases, open_session):  # noqa: F811
    shape, seed = SHAPES["count_distinct"], _seed("distinct-sens")
    sa, sb = open_session(databases["D"], seed, shape), open_session(databases["D'"], seed, shape)
    plan = sa.plan(shape.sql)
    reached = False
    for salt in _salts(seed)[:6]:
        ra, rb = _counts(sa, shape.sql, salt), _counts(sb, shape.sql, salt)
        moved = {k: abs(ra.get(k, 0) - rb.get(k, 0)) for k in set(ra) | set(rb)}
        assert max(moved.values()) <= plan.rows_per_unit and sum(v > 0 for v in moved.values()) <= plan.l0
        reached |= max(moved.values()) == plan.rows_per_unit
    assert reached


def _counts(session, sql: str, salt: int) -> dict:
    plan = session.plan(sql)
    rows = session.engine.run(to_sql(plan, session.engine.dialect), {SALT: salt}).rows
    nk = len(plan.keys)
    return {tuple(r[:nk]): r[-1] for r in rows}
