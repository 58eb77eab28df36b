"""Small versions of benchmarks/reconstruction.py: the attacks work on raw DuckDB and fail on dpsql.

dpsql's noise is seeded here (SeededRng), so every run is the same; the sizes are still chosen so
that the assertions would hold for almost every seed, i.e. a change to the sampler or the seeds
does not produce a false failure. The arguments are in the comments beside each assertion.
"""
from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from dpsql.analysis.reconstruction import CAP_CEILING, auto_cap
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


def expected_subset_answers(masks) -> int:
    """How many of a series of subset queries the default cap lets through, derived from the rule in
    docs/PRIVACY.md (a series stops once its answers reach auto_cap(identity values named so far, this
    query's included); refused queries add nothing)."""
    named: set[int] = set()
    answered = 0
    for mask in masks:
        union = named | set((np.flatnonzero(mask) + 1).tolist())
        if answered >= auto_cap(len(union)):
            continue
        named, answered = union, answered + 1
    return answered


def test_dinur_nissim_against_dpsql_is_capped_after_a_few_answers(rc, tmp_path):
    # The subset cap stops the series after a handful of answers (9 at n = 300: a quarter of
    # 300 / log2(301)), each charged 0.5 + the 0.5 surcharge; the other queries are refused before
    # anything runs. 9 answers with Laplace noise of scale 2 over 300 unknowns leave the LP far from
    # the truth: 20 such answers gained 1 point on average (sd 3.3) in a simulation of 400 runs.
    n = 300
    secret = rc.make_secret_db(tmp_path, n, seed=3)
    queries = rc.dn_queries(n, n, seed=5, variant="in")
    allowed = expected_subset_answers([q.mask for q in queries])
    assert 3 <= allowed <= CAP_CEILING
    target = rc.open_target("dpsql", secret, tmp_path, rng=SeededRng(4))
    try:
        guess, _ = rc.linear_attack(target, queries, secret)
        budget = target.budget()
    finally:
        target.close()
    assert target.sent == n
    assert target.answered == allowed and target.repeated == 0
    assert target.refusals == {"QueryRejected": n - allowed}
    assert budget["epsilon_spent"] == pytest.approx(allowed * 2 * 0.5)     # charged in full + surcharge 1.0
    assert rc.recovered(guess, secret.bits) <= rc.baseline(secret.bits) + 0.15

    # The series is in the ledger: a new connection for the same analyst is refused the next subset
    # query before anything runs, while a query that picks nobody by identity is still answered.
    ledger = next(tmp_path.glob("ledger-*.sqlite"))
    again = rc.DpsqlTarget(secret, ledger, rng=SeededRng(6))
    try:
        assert again.ask(f"{rc.SUM} WHERE person_id IN (1, 2, 3)") is None
        assert again.refusals == {"QueryRejected": 1}
        assert again.ask(rc.SUM) is not None
        assert again.epsilon_spent() == pytest.approx(allowed + 0.5)
    finally:
        again.close()

    # Every answered subset query and every refusal is in the audit log beside the ledger.
    events = [json.loads(line)["event"] for line in ledger.with_name(ledger.stem + ".audit.jsonl").open()]
    assert events.count("subset_charged") == allowed
    assert events.count("subset_refused") == n - allowed + 1


def test_averaging_attack_gets_the_same_answer_again(rc, tmp_path):
    # 5 rounds over 20 people: the first two single-person queries are answered (the cap of a series
    # naming 2 values is 2), their repeats come back identical from the cache, everyone else is refused.
    secret = rc.make_secret_db(tmp_path, 20, seed=13)
    target = rc.open_target("dpsql", secret, tmp_path, rng=SeededRng(14))
    answers: dict[int, list] = {}
    try:
        for _ in range(5):
            for t in range(1, 21):
                answers.setdefault(t, []).append(target.ask(f"{rc.SUM} WHERE person_id = {t}"))
        spent = target.epsilon_spent()
    finally:
        target.close()
    assert target.answered == 10 and target.repeated == 8
    assert target.refusals == {"QueryRejected": 90}
    for t in (1, 2):
        assert len(set(answers[t])) == 1 and answers[t][0] is not None      # identical: averaging gains nothing
    assert all(a is None for t in range(3, 21) for a in answers[t])
    assert spent == pytest.approx(2 * 1.0)


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
