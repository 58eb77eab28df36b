"""Report-noisy-max top-k (dpsql.noise.topk): the exact sampler has the peeling distribution (which is
the one-shot Gumbel top-k's), monotone vs general temperature, accounting and accuracy statements."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from scipy import stats

from dpsql.errors import InvalidSetting
from dpsql.noise import SeededRng
from dpsql.noise.topk import NoisyTopK


def _peeling_probabilities(scores, c, k):
    """P(ordered tuple) for k peels of exp(c * u), exactly as floats."""
    w = [math.exp(c * s) for s in scores]
    out = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, left = 1.0, set(range(len(scores)))
        for i in seq:
            p *= w[i] / sum(w[j] for j in left)
            left.remove(i)
        out[seq] = p
    return out


@pytest.mark.parametrize("monotone", [True, False])
def test_choice_has_exactly_the_peeling_distribution(monotone):
    scores = [Fraction(3), Fraction(1), Fraction(0), Fraction(5, 2), Fraction(-1)]
    m = NoisyTopK(1.2, 2, Fraction(1), monotone, len(scores))
    c = 1.2 / 2 / (1 if monotone else 2)
    assert m.scale == pytest.approx(1 / c)
    want = _peeling_probabilities([float(s) for s in scores], c, 2)
    rng = SeededRng(11)
    n = 30000
    seen = dict.fromkeys(want, 0)
    for _ in range(n):
        got = m.choose(scores, rng)
        assert len(set(got)) == 2
        seen[tuple(got)] += 1
    chi = stats.chisquare(list(seen.values()), [n * want[s] for s in seen])
    assert chi.pvalue > 1e-6, (seen, want)


def test_gumbel_one_shot_matches_peeling():
    """Durfee & Rogers: the top k of u + Gumbel(1/c) has the peeling distribution (checked here in
    floating point against the same exact probabilities the sampler is tested against)."""
    import random
    scores = [2.0, 1.0, 0.5, 0.0]
    c = 0.8
    want = _peeling_probabilities(scores, c, 2)
    r = random.Random(5)
    n = 30000
    seen = dict.fromkeys(want, 0)
    for _ in range(n):
        noisy = [s - math.log(-math.log(r.random() or 1e-300)) / c for s in scores]
        seen[tuple(sorted(range(4), key=lambda i: -noisy[i])[:2])] += 1
    assert stats.chisquare(list(seen.values()), [n * want[s] for s in seen]).pvalue > 1e-6


def test_clear_gaps_give_the_true_top_k_and_far_scores_are_cheap_to_reject():
    scores = [10_000, 0, 50_000, 3, 30_000, 1] + [0] * 200
    m = NoisyTopK(1.0, 3, Fraction(1), True, len(scores))
    rng = SeededRng(3)
    for _ in range(20):
        assert m.choose(scores, rng) == [2, 4, 0]


def test_accounting_and_accuracy():
    m = NoisyTopK(2.0, 4, Fraction(5), True, 50)
    assert m.rho == Fraction(4) * (Fraction(2) / 4) ** 2 / 8 == Fraction(1, 8)   # eps^2 / (8k)
    assert m.score_gap() == pytest.approx(m.scale * (math.log(50) + math.log(4 / 0.05)))
    assert m.delta == 0 and m.params()["score_sensitivity"] == 5.0


@pytest.mark.parametrize("args", [(0.0, 1, Fraction(1), True, 3), (float("inf"), 1, Fraction(1), True, 3),
                                  (1.0, 0, Fraction(1), True, 3), (1.0, 4, Fraction(1), True, 3),
                                  (1.0, 1, Fraction(0), True, 3)])
def test_bad_parameters(args):
    with pytest.raises(InvalidSetting):
        NoisyTopK(*args)


def test_one_score_per_candidate():
    with pytest.raises(InvalidSetting):
        NoisyTopK(1.0, 1, Fraction(1), True, 3).choose([1, 2], SeededRng(1))
