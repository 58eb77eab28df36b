"""Small versions of benchmarks/reconstruction.py: the attacks work on raw DuckDB and fail on dpsql.

dpsql's noise is seeded here (SeededRng), so every run is the same; the sizes are still chosen so
that the assertions would hold for almost every seed, i.e. a change to the sampler or the seeds
does not produce a false failure. The arguments are in the comments beside each assertion.
"""
from __future__ import annotations


import duckdb
import numpy as np
import pytest

from dpsql.noise.rng import SeededRng
from tests.conftest import benchmark_script



@pytest.fixture(scope="module")
def rc():
    with benchmark_script("reconstruction") as module:
        yield module


def test_dinur_nissim_reconstructs_raw_duckdb(rc, tmp_path):
    secret = rc.make_secret_db(tmp_path, 40, seed=1)
    r = rc.run_attack("dn-in", "raw", secret, tmp_path, seed=2)
    assert (r.sent, r.answered, r.refused) == (160, 160, 0)
    # 160 exact subset sums over 40 unknowns: the LP has the true bits as its unique optimum.
    assert r.recovered >= 0.95


def test_dinur_nissim_against_dpsql_learns_little_and_exhausts_the_budget(rc, tmp_path):
    # Size: the budget (10 / 0.5 per query) lets 20 subset sums through, each with Laplace noise of
    # scale 2. With each person in half of them, a person's privacy loss is about 5, so on a small
    # table the LP does learn something: at n = 40, a simulation of this exact decoder (20 answers,
    # Laplace(2)) recovered on average baseline + 8 points and more than baseline + 15 points in 25%
    # of 200 runs -- the assertion would be a coin flip there. At n = 300 the mean gain was 1 point
    # (sd 3.3) and the largest of 400 runs was + 11 points, so + 15 is more than 4 sd away. Only the
    # first 20 answers matter, so 300 queries (1 per person; the benchmark sends 4n) decode the same.
    n = 300
    secret = rc.make_secret_db(tmp_path, n, seed=3)
    target = rc.open_target("dpsql", secret, tmp_path, rng=SeededRng(4))
    try:
        guess, _ = rc.linear_attack(target, rc.dn_queries(n, n, seed=5, variant="in"), secret)
        budget = target.budget()
    finally:
        target.close()
    assert target.sent == n
    assert target.answered == 20                         # 10 / 0.5
    assert target.refusals == {"BudgetExhausted": n - 20}
    assert budget["epsilon_spent"] == pytest.approx(10.0)
    assert budget["epsilon_remaining"] == pytest.approx(0.0)
    assert rc.recovered(guess, secret.bits) <= rc.baseline(secret.bits) + 0.15

    # The ledger on disk agrees: a new connection for the same analyst is refused before anything runs.
    ledger = next(tmp_path.glob("ledger-*.sqlite"))
    again = rc.DpsqlTarget(secret, ledger, rng=SeededRng(6))
    try:
        assert again.epsilon_spent() == pytest.approx(10.0)
        assert again.ask(rc.SUM) is None
        assert again.refusals == {"BudgetExhausted": 1}
    finally:
        again.close()


def test_difference_attack_raw_and_dpsql(rc, tmp_path):
    raw = rc.run_attack("difference", "raw", rc.make_secret_db(tmp_path, 40, seed=7), tmp_path)
    assert raw.recovered == 1.0
    assert (raw.sent, raw.answered) == (80, 80)

    # n = 100: at most 20 answers = 10 (total, all-but-t) pairs get through; every other person is
    # guessed 0, which is right for a fraction of them no larger than the baseline. So whatever the
    # noise, recovered <= baseline + 10/100 < baseline + 0.15: this cannot fail by chance.
    r = rc.run_attack("difference", "dpsql", rc.make_secret_db(tmp_path, 100, seed=8), tmp_path,
                      rng=SeededRng(9))
    assert (r.sent, r.answered, r.refusals) == (200, 20, {"BudgetExhausted": 180})
    assert r.epsilon == pytest.approx(10.0)
    assert r.recovered <= r.baseline + 0.15


def test_arithmetic_selector_works_on_raw_and_is_refused_by_dpsql(rc, tmp_path):
    n = 40
    secret = rc.make_secret_db(tmp_path, n, seed=10)
    queries = rc.arith_queries(n, 4 * n, seed=11)

    # The attacker's Python copy of the predicate selects exactly the rows DuckDB selects.
    con = duckdb.connect(str(secret.path), read_only=True)
    try:
        for q in queries[:20]:
            ids = [row[0] for row in con.execute(
                q.sql.replace("SELECT SUM(secret)", "SELECT person_id") + " ORDER BY 1").fetchall()]
            assert ids == (np.flatnonzero(q.mask) + 1).tolist()
    finally:
        con.close()

    raw = rc.run_attack("arith", "raw", secret, tmp_path, seed=11)
    assert raw.recovered >= 0.95

    target = rc.open_target("dpsql", secret, tmp_path, rng=SeededRng(12))
    try:
        guess, _ = rc.linear_attack(target, queries[:10], secret)
        spent = target.epsilon_spent()
    finally:
        target.close()
    assert target.refusals == {"QueryRejected": 10} and target.answered == 0
    assert spent == 0.0                                  # refused in analysis: nothing charged
    assert not guess.any()                               # nothing learned: everyone guessed 0
