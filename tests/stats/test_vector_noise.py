"""The batch samplers (dpsql.noise.vector) draw from the same laws as the scalar ones (marker ``stats``).

Each test has a fixed seed chosen once (not searched) and rejects only at p < 1e-6, so a correct
implementation fails each with probability below 1e-6; a file of 18 checks below 1.8e-5, the
suite's 1-in-10,000 budget with room. Two kinds of check: goodness of fit against the exact pmf
(chi-square, tails pooled; KS against the continuous law at grid scales, where the discrete law is
the continuous one to ~2**-40), and two-sample homogeneity of vector against scalar draws."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsql.noise import SeededRng, discrete_gaussian, discrete_laplace, make_mechanism
from dpsql.noise import vector as V
from dpsql.noise import vector_samplers as S
from dpsql.noise.exponential import QuantileEM

pytestmark = pytest.mark.stats

N = 40_000
P_REJECT = 1e-6


def _bins(samples, pmf, lo=-400, hi=400):
    """Observed and expected counts over integer bins, tails pooled so every bin expects >= 5."""
    support = range(lo, hi + 1)
    probs = np.array([pmf(x) for x in support])
    probs /= probs.sum()
    n = len(samples)
    keep = [i for i, p in enumerate(probs) if n * p >= 5]
    a, b = support[keep[0]], support[keep[-1]]
    edges = [a - 0.5 + i for i in range(b - a + 2)]
    inner = np.histogram(samples, bins=edges)[0]
    s = np.asarray(samples)
    observed = np.concatenate([[np.sum(s < a)], inner, [np.sum(s > b)]])
    exp_inner = probs[keep[0]:keep[-1] + 1]
    expected = np.concatenate([[probs[:keep[0]].sum()], exp_inner, [probs[keep[-1] + 1:].sum()]])
    if expected[0] == 0:
        observed, expected = observed[1:], expected[1:]
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return observed, expected * n / expected.sum()


def _fits(samples, pmf, lo=-400, hi=400) -> float:
    observed, expected = _bins(np.asarray(samples, dtype=np.int64), pmf, lo, hi)
    return stats.chisquare(observed, expected).pvalue


def _same_law(a, b) -> float:
    """Chi-square homogeneity of two integer samples, bins with >= 10 expected pooled into tails."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    both = np.concatenate([a, b])
    lo, hi = np.quantile(both, [0.002, 0.998]).astype(int)
    edges = np.arange(lo, hi + 2) - 0.5
    def counts(x):
        return np.concatenate([[np.sum(x < lo)], np.histogram(x, bins=edges)[0], [np.sum(x > hi)]])
    table = np.array([counts(a), counts(b)])
    table = table[:, table.sum(axis=0) > 0]
    return stats.chi2_contingency(table).pvalue


@pytest.mark.parametrize("lam", [Fraction(2, 3), Fraction(1, 5), Fraction(7, 2), Fraction(3, 7), Fraction(2, 9)])
def test_vector_laplace_matches_the_pmf(lam):
    """2/3: M = 1; 1/5: c = 1; 7/2: M = 0; 3/7 and 2/9: M = 2 and 4 with c = 6/7 and 8/9, where the
    remainder A's acceptance needs both of its coins."""
    samples = S.laplace(SeededRng(2718), 4 * N, lam)
    assert _fits(samples, lambda x: math.exp(-abs(x) * float(lam))) > P_REJECT


def test_vector_geometric_above_rate_one_matches_the_pmf():
    lam = Fraction(9, 4)                           # M = 0: counted exp(-lam) coins
    samples = S.geometric(SeededRng(99), N, lam)
    assert _fits(samples, lambda x: math.exp(-x * float(lam)) if x >= 0 else 0.0, 0, 50) > P_REJECT


@pytest.mark.parametrize("sigma", [1, 3, 8])
def test_vector_gaussian_matches_the_pmf(sigma):
    samples = S.gaussian(SeededRng(31415), N, sigma)
    assert _fits(samples, lambda x: math.exp(-x * x / (2 * sigma * sigma))) > P_REJECT


def test_vector_and_scalar_draws_have_one_law():
    """Two-sample checks: the batch path against discrete_laplace and discrete_gaussian."""
    rng = SeededRng(161803)
    n = 20_000
    lap_v = S.laplace(rng, n, Fraction(2, 5))
    lap_s = [discrete_laplace(Fraction(5, 2), rng) for _ in range(n)]
    assert _same_law(lap_v, lap_s) > P_REJECT
    gau_v = S.gaussian(rng, n, 4)
    gau_s = [discrete_gaussian(16, rng) for _ in range(n)]
    assert _same_law(gau_v, gau_s) > P_REJECT


def test_vector_noise_at_grid_scale_is_the_continuous_law():
    """At 2**40 grid units and more the discrete laws are their continuous ones to ~2**-40."""
    sigma = 2**45 + 12345
    g = S.gaussian(SeededRng(4242), N, sigma).astype(float) / sigma
    assert stats.kstest(g, stats.norm().cdf).pvalue > P_REJECT
    scale = Fraction(2**43 * 10 + 7, 3)               # rational, not whole: M and c of vector_samplers.geometric
    x = S.laplace(SeededRng(4343), N, 1 / scale).astype(float) / float(scale)
    assert stats.kstest(x, stats.laplace().cdf).pvalue > P_REJECT


def test_batch_release_of_a_mechanism_has_its_noise():
    for kind, seed in (("laplace", 5), ("gaussian", 6)):
        m = make_mechanism(kind, 1.0, 0.7, 1e-6)
        out = np.array(V.release_values(m, [100] * N, SeededRng(seed))) - 100
        law = stats.laplace(scale=m.scale) if kind == "laplace" else stats.norm(scale=m.sigma)
        assert stats.kstest(out, law.cdf).pvalue > P_REJECT


@pytest.mark.parametrize("q, eps, rows, l0", [(Fraction(1, 2), 1.0, 1, 1), (Fraction(9, 10), 0.3, 2, 3),
                                              (Fraction(1, 4), 40.0, 1, 1)])
def test_vector_quantile_choice_has_the_exponential_mechanisms_law(q, eps, rows, l0):
    """As tests/noise/test_exponential.py checks the scalar choice (40.0: lam > 1, the M = 0 branch)."""
    em = QuantileEM(eps, q, Fraction(0), Fraction(1), rows=rows, l0=l0, bins=8)
    counts = [3, 0, 1, 4, 0, 2, 5, 1]
    text = ",".join(f"{b}:{c}" for b, c in enumerate(counts) if c)
    w = [math.exp(-float(x)) for x in em.gammas(counts)]
    p = np.array(w) / sum(w)
    chosen = V._choose(em, V._Hists(em, [text] * N), SeededRng(7))
    seen = np.bincount(chosen, minlength=8)
    keep = p * N >= 5
    observed = np.append(seen[keep], seen[~keep].sum())
    expected = np.append(p[keep] * N, p[~keep].sum() * N)
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > P_REJECT
