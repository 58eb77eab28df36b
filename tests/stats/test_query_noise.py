"""The noise of whole queries, released through the real pipeline (marker ``stats``).

A DuckDB table of 1000 people, one row each (``pid`` is the PRIMARY KEY, so the
unique-unit path is used), with ages partly outside the declared bounds [0, 100]: the
exact answers are known (COUNT(*) = 1000, SUM and AVG of the clipped ages). Each query
is released N_RELEASES times through ``dpsql.connect`` / ``Cursor.execute`` (parse,
analysis, rewrite, ledger charge, engine, noise, post-processing: nothing bypassed),
with a SeededRng whose seed was fixed once and not searched for. Then:

* released minus truth follows the law the cursor reports: Laplace(scale =
  cursor.accuracy noise_scale) for the Laplace mechanism, Normal(0, sigma) for the
  analytic Gaussian (KS test, rejected at p < 1e-6); the reported scale is the one
  EXPLAIN DP shows and is calibrated from the plan's sensitivity and epsilon share;
* the fraction of releases within the reported ci95 half-width is 0.95 (two-sided
  binomial test, rejected at p < 1e-6);
* AVG: the mean of the released values is the clipped true mean, within 4.9 standard
  errors plus a bound on the ratio estimator's bias; and the per-value half-widths
  (cursor.half_widths) cover the truth at least 95% of the time (one-sided, p < 1e-6).

Ten tests at 1e-6 each: a correct implementation fails this file with probability
below 1e-5 (DESIGN.md asks < 1e-4).

Speed: every release charges the ledger, which commits with synchronous=FULL. The
ledger goes to a RAM disk (/dev/shm) when there is one, which halves the time of a
release; elsewhere it goes to tmp_path.
"""
from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pytest
from scipy import stats

import dpsql
from dpsql.noise import SeededRng, analytic_gaussian_sigma

pytestmark = pytest.mark.stats

N_PEOPLE = 1000
N_RELEASES = 5000
P_REJECT = 1e-6
Z_REJECT = float(stats.norm.isf(P_REJECT / 2))      # two-sided, about 4.89
LO, HI = 0, 100                                       # declared bounds of age
EPSILON = 1.0
DELTA_GAUSSIAN = 1e-6

LAPLACE_QUERY = "SELECT COUNT(*) AS n, SUM(age) AS total, AVG(age) AS mean FROM people"
GAUSSIAN_QUERY = "SELECT COUNT(*) AS n, SUM(age) AS total FROM people"


def _ages() -> list[int]:
    r = random.Random(5551212)
    # mostly inside the bounds; some above (clipped to 100), one far below (clipped to 0)
    return [r.randint(0, 99) if i % 10 else r.randint(101, 400) for i in range(N_PEOPLE - 1)] + [-5000]


AGES = _ages()
CLIPPED = [min(max(a, LO), HI) for a in AGES]
TRUTH = {"n": N_PEOPLE, "total": sum(CLIPPED), "mean": sum(CLIPPED) / N_PEOPLE}


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("query_noise") / "people.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE people (pid INTEGER PRIMARY KEY, age INTEGER)")
        con.executemany("INSERT INTO people VALUES (?, ?)", list(enumerate(AGES, start=1)))
    finally:
        con.close()
    return str(path)


@pytest.fixture
def ledger(tmp_path):
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="dpsql-stats-", dir=shm))
        yield d / "ledger.sqlite"
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path / "ledger.sqlite"


def _connect(database: str, ledger: Path, seed: int, *settings: str):
    policy = {"budget": {"epsilon": 1e6, "delta": 0.5, "ledger": str(ledger)},
              "tables": {"people": {"privacy_unit": "pid",
                                    "columns": {"age": {"lower": LO, "upper": HI}}}},
              # each repeat must be a fresh release (the answer cache would repeat the first one)
              "reconstruction": {"cache_lifetime": 0}, "timing": {"quantum": 0, "floor": 0}}
    conn = dpsql.connect(database, policy=policy, analyst="tester", rng=SeededRng(seed))
    cur = conn.cursor()
    for stmt in (f"SET dpsql.epsilon = {EPSILON}", *settings):
        cur.execute(stmt)
    return conn, cur


def _explain(cur, query: str) -> dict[str, tuple]:
    """EXPLAIN DP value rows by aggregate label."""
    cur.execute("EXPLAIN DP (WIDE) " + query)
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    return {r["aggregate"]: r for r in rows if r["item"] == "value"}


def _release(cur, query: str) -> tuple[dict[str, np.ndarray], list, dict[str, np.ndarray]]:
    """N_RELEASES releases: values and half-widths per column, and the cursor's accuracy."""
    values, widths, accuracy = [], [], None
    for _ in range(N_RELEASES):
        cur.execute(query)
        (row,) = cur.fetchall()
        values.append(row)
        widths.append(cur.half_widths[0])
        accuracy = accuracy or cur.accuracy
        # a plain aggregate's accuracy never depends on the draw (the mechanism's parameters alone);
        # a derived column's (AVG) is the widest half-width of its released values
        plain = [(a, b) for a, b in zip(cur.accuracy, accuracy) if a is not None and a.noise_scale is not None]
        assert all(a == b for a, b in plain)
        for i, a in enumerate(cur.accuracy):
            if a is not None and a.noise_scale is None:
                assert a.ci95 == max(w[i] for w in cur.half_widths)
    names = [d[0] for d in cur.description]
    return ({n: np.array([v[i] for v in values], dtype=float) for i, n in enumerate(names)},
            dict(zip(names, accuracy)),
            {n: np.array([w[i] for w in widths], dtype=float) for i, n in enumerate(names)})


def _coverage_ok(hits: int, n: int, p: float = 0.95) -> float:
    return stats.binomtest(hits, n, p).pvalue


def test_laplace_count_sum_avg(database, ledger):
    conn, cur = _connect(database, ledger, 20240612)
    with conn:
        explained = _explain(cur, LAPLACE_QUERY)
        values, accuracy, widths = _release(cur, LAPLACE_QUERY)
        assert cur.cost.epsilon == EPSILON and cur.cost.delta == 0
    parts = len(explained)                        # COUNT(*), SUM(age), AVG's sum and count
    for col, label, sensitivity in (("n", "COUNT(*)", 1.0), ("total", "SUM(age)", float(HI))):
        acc = accuracy[col]
        assert acc.mechanism == "laplace"
        b = acc.noise_scale
        # what EXPLAIN DP shows, and calibrated as sensitivity / epsilon share (grid: +2^-24)
        assert explained[label]["noise_scale"] == b and explained[label]["ci95_half_width"] == acc.ci95
        assert explained[label]["sensitivity"] == sensitivity
        assert sensitivity / (EPSILON / parts) <= b <= sensitivity / (EPSILON / parts) * (1 + 1e-6)
        assert acc.ci95 == pytest.approx(b * math.log(20), rel=1e-12)
        noise = values[col] - TRUTH[col]
        assert stats.kstest(noise, stats.laplace(scale=b).cdf).pvalue > P_REJECT, col
        hits = int(np.count_nonzero(np.abs(noise) <= acc.ci95))
        assert _coverage_ok(hits, N_RELEASES) > P_REJECT, (col, hits / N_RELEASES)

    # AVG: post-processing of a noisy centered sum and a noisy count
    mean = values["mean"]
    assert accuracy["mean"].noise_scale is None and accuracy["mean"].ci95 > 0     # the widest released half-width
    assert np.all((LO <= mean) & (mean <= HI))
    b_count = explained["COUNT(age)"]["noise_scale"]
    # E[s/C] - s/c is about (s/c) Var(C)/c^2 for C = c + Lap(b): bounded with room to spare
    bias = (HI - LO) / 2 * 4 * (2 * b_count**2) / N_PEOPLE**2
    se = mean.std(ddof=1) / math.sqrt(N_RELEASES)
    assert abs(mean.mean() - TRUTH["mean"]) <= Z_REJECT * se + bias, (mean.mean(), TRUTH["mean"], se)
    covered = int(np.count_nonzero(np.abs(mean - TRUTH["mean"]) <= widths["mean"]))
    assert stats.binomtest(covered, N_RELEASES, 0.95, alternative="less").pvalue > P_REJECT, covered


def test_gaussian_count_sum(database, ledger):
    conn, cur = _connect(database, ledger, 8675309,
                         f"SET dpsql.delta = {DELTA_GAUSSIAN}", "SET dpsql.mechanism = 'gaussian'")
    with conn:
        explained = _explain(cur, GAUSSIAN_QUERY)
        values, accuracy, _ = _release(cur, GAUSSIAN_QUERY)
        assert cur.cost.epsilon == EPSILON and cur.cost.delta == pytest.approx(DELTA_GAUSSIAN)
    parts = len(explained)
    for col, label, sensitivity in (("n", "COUNT(*)", 1.0), ("total", "SUM(age)", float(HI))):
        acc = accuracy[col]
        assert acc.mechanism == "gaussian"
        sigma = acc.noise_scale
        row = explained[label]
        assert row["noise_scale"] == sigma and row["ci95_half_width"] == acc.ci95
        assert row["sensitivity"] == sensitivity
        # at least the analytic Gaussian sigma for this share of epsilon and delta (the
        # grid and the discrete margin add a relative 1e-6 at most)
        nominal = analytic_gaussian_sigma(sensitivity, EPSILON / parts, DELTA_GAUSSIAN / parts)
        assert nominal <= sigma <= nominal * (1 + 1e-5)
        assert acc.ci95 == pytest.approx(sigma * stats.norm.ppf(0.975), rel=1e-9)
        noise = values[col] - TRUTH[col]
        assert stats.kstest(noise, stats.norm(scale=sigma).cdf).pvalue > P_REJECT, col
        hits = int(np.count_nonzero(np.abs(noise) <= acc.ci95))
        assert _coverage_ok(hits, N_RELEASES) > P_REJECT, (col, hits / N_RELEASES)
