"""Automatic clipping bounds (dpsql.analysis.auto_bounds): the policy entry, the candidate grid,
AboveThreshold's choice and its privacy loss on neighbouring count vectors, and the refusals."""
from __future__ import annotations

import math
import random
from fractions import Fraction
from itertools import pairwise

import pytest

from dpsql.analysis import auto_bounds
from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.datagen import demo_policy
from dpsql.errors import PolicyError, QueryRejected
from dpsql.noise import SeededRng, make_mechanism
from dpsql.policy import load_policy
from dpsql.rewrite.auto_bounds import count_sql

_PEOPLE = {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR", "sex": "VARCHAR",
           "education": "VARCHAR"}
_VISITS = {"visit_id": "BIGINT", "person_id": "BIGINT", "visit_date": "DATE", "state": "VARCHAR",
           "cost": "DOUBLE", "kind": "VARCHAR"}
SCHEMA = Schema({"people": _PEOPLE, "visits": _VISITS}, frozenset(), frozenset({"people", "visits"}))


def _policy(**cols):
    pol = demo_policy(ledger="unused.sqlite")
    pol["tables"]["people"]["columns"]["income"] = {"lower": 0, "upper": 1e9, "bounds": "auto"}
    pol["tables"]["people"]["columns"].update(cols)
    return load_policy(pol)


def _laplace(sens, eps, value, rng):
    return make_mechanism("laplace", sens, eps, 0.0).release(Fraction(value), rng)


def _plan(sql, policy=None):
    policy = policy or _policy()
    plan = analyze(classify(sql).tree, policy, SCHEMA, Settings(1.0, 1e-8, "laplace"), "duckdb")
    return plan, auto_bounds.find(plan, policy, 1.0)


def test_policy_entry():
    assert _policy().tables["people"].columns["income"].auto
    with pytest.raises(PolicyError, match="outer hard range"):
        _policy(age={"bounds": "auto"})
    with pytest.raises(PolicyError, match='must be "auto"'):
        _policy(age={"lower": 0, "upper": 120, "bounds": "tight"})


def test_candidates_geometric_within_the_hard_range():
    c = auto_bounds.candidates(Fraction(0), Fraction(10**9), False)
    assert c[-1] == 10**9 and all(a < b for a, b in pairwise(c)) and len(c) == auto_bounds.GRID
    assert all(b / a == pytest.approx(2, rel=1e-3) for a, b in pairwise(c))
    w = auto_bounds.candidates(Fraction(0), Fraction(120), True)
    assert all(x.denominator == 1 for x in w) and w[-1] == 120 and len(set(w)) == len(w)


def test_found_for_sum_and_avg_with_the_split():
    _, auto = _plan("SELECT SUM(income), AVG(income) FROM people")
    assert auto is not None and auto.column == "income" and auto.epsilon == pytest.approx(0.1)
    assert auto.threshold == pytest.approx((2 / 0.05) * math.log(len(auto.candidates)))
    assert _plan("SELECT COUNT(income) FROM people")[1] is None
    assert _plan("SELECT SUM(age) FROM people")[1] is None


def test_refused_inside_expressions():
    with pytest.raises(QueryRejected, match="chosen automatically only for SUM and AVG"):
        _plan("SELECT SUM(income * 2) FROM people")


def test_count_query_one_row_every_candidate():
    plan, auto = _plan("SELECT SUM(income) FROM people WHERE age > 30")
    sql = count_sql(plan, auto, "duckdb")
    assert sql.count("COUNT(DISTINCT CASE WHEN") == len(auto.candidates) and "GROUP BY" not in sql
    assert "people.age > 30" in sql


def test_above_threshold_picks_the_first_small_count():
    _, auto = _plan("SELECT SUM(income) FROM people")
    n = 100_000
    counts = [n] * 20 + [0] * (len(auto.candidates) - 20)       # every value below candidate 20
    picks = [auto_bounds.above_threshold(counts, auto, SeededRng(s), _laplace) for s in range(200)]
    assert sum(p == 20 for p in picks) >= 190


def test_above_threshold_privacy_loss_on_neighbouring_counts():
    """Neighbours differ by one unit: every count by at most 1 (here all by +1, the worst case for
    a monotone change). The empirical probability of each index stays within e^eps_svt (plus
    sampling slack) of its neighbour's."""
    _, auto = _plan("SELECT SUM(income) FROM people")
    auto = auto_bounds.AutoBound(auto.table, auto.alias, auto.column, auto.lower, auto.upper,
                                 auto.candidates[:6], 2.0, 3.0)
    a = [8, 6, 4, 3, 2, 1]
    b = [x + 1 for x in a]
    runs = 6000
    rng = random.Random(3)
    pa, pb = {}, {}
    for _ in range(runs):
        i = auto_bounds.above_threshold(a, auto, SeededRng(rng.getrandbits(64)), _laplace)
        j = auto_bounds.above_threshold(b, auto, SeededRng(rng.getrandbits(64)), _laplace)
        pa[i] = pa.get(i, 0) + 1
        pb[j] = pb.get(j, 0) + 1
    for k in set(pa) | set(pb):
        x, y = pa.get(k, 0), pb.get(k, 0)
        if min(x, y) >= 300:        # enough samples for the ratio to mean something
            assert max(x, y) / min(x, y) <= math.exp(auto.epsilon) * 1.3, (k, x, y)
