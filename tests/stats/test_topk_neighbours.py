"""Neighbouring-dataset tests for SET dpsql.topk = 'noisy_max' (dpsql.noise.topk, dpsql.analysis.topk),
on the datasets of tests/stats/test_neighbours.py: D holds unit X (7 rows in 3 states, values far
beyond the bounds), D' is D without X; people allows 2 rows and 2 states per person, so X moves two
states' scores by up to the per-group bound each. For each shape the shipped release path (plan,
rewrite, engine run per salt from a pool, dpsql.release.release, which calls its _top) releases the
query many times on D and on D', and the checker of test_neighbours tests
P_D(E) <= e^eps P_D'(E) (and the reverse) for the events "key s is ranked first", "key s is among
the k released" and "the released ranking is (s, t)", at the selection's own epsilon (plan.topk:
the keys depend on nothing else).

False failures: one-sided Clopper-Pearson bounds at ALPHA each, Bonferroni over the MAX_EVENTS
events of this file: a correct implementation fails it with probability <= 4 * MAX_EVENTS * ALPHA
= 5e-5 < 1e-4. The releases are seeded (SeededRng, fixed salts): the run is deterministic.

test_checker_detects_a_broken_selection runs the same checker on a selection whose temperature is
8 times too small for its claim and requires a violation: the events have power here.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import replace

import numpy as np
import pytest

from dpsql.analysis.topk import TARGET
from dpsql.noise.topk import NoisyTopK
from tests.stats.test_neighbours import (  # noqa: F401 (fixtures)
    N_PILOT,
    STATES,
    Releases,
    Shape,
    _salts,
    _seed,
    assert_fast_path_ships,
    databases,
    dp_violations,
    open_session,
)

pytestmark = pytest.mark.stats

N = 6000
FALSE_FAILURE_BUDGET = 5e-5
MAX_EVENTS = 200
ALPHA = FALSE_FAILURE_BUDGET / (4 * MAX_EVENTS)
TOPK = "SET dpsql.topk = 'noisy_max'"

SHAPES = {
    # monotone counts, keys only: the whole epsilon (0.5 here) to the selection, 2 peels
    "count_keys": Shape("SELECT state FROM people GROUP BY state ORDER BY COUNT(*) DESC LIMIT 2",
                        (), (TOPK, "SET dpsql.epsilon = 0.5")),
    # a monotone SUM with its value released: half the epsilon to the selection
    "sum_with_value": Shape("SELECT state, SUM(income) AS s FROM people GROUP BY state ORDER BY s DESC LIMIT 2",
                            (), (TOPK, "SET dpsql.epsilon = 0.5")),
    # bounds straddling 0 (age - 50 in [-50, 50]): not monotone, 2 Delta per peel; the bottom 1
    "sum_straddling_bottom": Shape("SELECT state FROM people GROUP BY state ORDER BY SUM(age - 50) ASC LIMIT 1",
                                   (), (TOPK, "SET dpsql.epsilon = 0.2")),
}


def _events(k: int):
    out = []
    for s in STATES:
        out.append((f"{s} first", lambda r, s=s: np.array([x[0] == s for x in r])))
        out.append((f"{s} released", lambda r, s=s: np.array([s in x for x in r])))
    if k == 2:
        for s, t in itertools.permutations(STATES, 2):
            out.append((f"ranking ({s}, {t})", lambda r, s=s, t=t: np.array([x == (s, t) for x in r])))
    return out


def _n_events(sql: str) -> int:
    return len(_events(2 if "LIMIT 2" in sql else 1))


def test_event_budget():
    assert sum(_n_events(s.sql) for s in SHAPES.values()) + _n_events(SHAPES["count_keys"].sql) <= MAX_EVENTS
    assert 4 * MAX_EVENTS * ALPHA <= FALSE_FAILURE_BUDGET < 1e-4


def _rankings(rel: Releases, n: int, pick: random.Random, mechs=None) -> list[tuple]:
    return [tuple(row[0] for row in table.rows) for table in rel.draw(n, pick, mechs=mechs)]


def _check(name, databases, open_session, *, broken: bool = False):  # noqa: F811
    shape, seed = SHAPES[name], _seed("topk-" + name)
    salts = _salts(seed)
    a = Releases(open_session(databases["D"], seed, shape), shape.sql, salts)
    b = Releases(open_session(databases["D'"], seed + 7, shape), shape.sql, salts)
    t = a.plan.topk
    assert t is not None and a.plan.group_choice        # X's groups depend on the salt: the pool is used
    mechs = None
    if broken:      # the claim stays t.epsilon; the selection runs 8 times hotter
        mechs = dict(a.mechs)
        mechs[TARGET] = NoisyTopK(8 * t.epsilon, t.k, t.sensitivity, t.monotone, t.candidates)
    pick_a, pick_b = random.Random(seed + 1), random.Random(seed + 2)
    _rankings(a, N_PILOT, pick_a, mechs)            # as the other neighbour tests: the pilot draws come first
    _rankings(b, N_PILOT, pick_b)
    ra, rb = _rankings(a, N, pick_a, mechs), _rankings(b, N, pick_b)
    assert all(len(r) == t.k for r in ra + rb)
    events = _events(t.k)
    bad = dp_violations(ra, rb, events, t.epsilon, 0.0, ALPHA)
    return bad, len(events), (ra, rb)


@pytest.mark.parametrize("name", SHAPES)
def test_topk_dp_inequality(name, databases, open_session):  # noqa: F811
    bad, tested, (ra, rb) = _check(name, databases, open_session)
    assert tested <= MAX_EVENTS
    assert not bad, bad
    # the releases are not degenerate: at least two keys are ranked first on D, so events have mass
    assert len({r[0] for r in ra}) >= 2


def test_checker_detects_a_broken_selection(databases, open_session):  # noqa: F811
    bad, _, _ = _check("count_keys", databases, open_session, broken=True)
    assert bad


def test_the_value_column_keeps_its_own_noise(databases, open_session):  # noqa: F811
    """With the value released, the rows carry the fresh Laplace value of each selected key
    (its half-width is the value mechanism's), in the selection's order."""
    shape = SHAPES["sum_with_value"]
    rel = Releases(open_session(databases["D"], 5, shape), shape.sql, _salts(5))
    table, = rel.draw(1, random.Random(0))
    assert len(table.rows) == 2 and all(isinstance(r[1], float) for r in table.rows)
    spec = next(s for s in rel.plan.noise if s.target != TARGET)
    assert all(w[1] == pytest.approx(rel.mechs[spec.target].half_width()) for w in table.widths)
    assert replace(rel.plan.topk, values=False) != rel.plan.topk and rel.plan.topk.values


@pytest.mark.parametrize("name", SHAPES)
def test_fast_path_is_the_shipped_release(name, databases, open_session):  # noqa: F811
    """Same seed: Session.execute (with SET dpsql.topk) and the cached-engine path used above
    release identical tables, so the inequality is tested on what ships."""
    def is_topk(plan) -> None:
        assert plan.topk is not None
    assert_fast_path_ships(databases["D"], SHAPES[name], _seed("topk-fast-" + name), open_session, is_topk)
