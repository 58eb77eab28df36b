"""The exponential mechanism for quantiles (dpsql.noise.exponential): exact utilities, the exact
sampler's distribution, the histogram text, accounting and accuracy statements."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
from scipy import stats

from dpsql.errors import InternalError, InvalidSetting
from dpsql.noise import SeededRng
from dpsql.noise.exponential import QuantileEM, parse_histogram


def test_utilities_are_the_distance_from_the_target_rank_to_each_bins_interval():
    m = QuantileEM(1.0, Fraction(1, 2), Fraction(0), Fraction(8), rows=1, l0=1, bins=8)
    counts = [0, 2, 0, 3, 1, 0, 0, 4]          # n = 10, t = q * (n - 1) = 4.5
    d, den = m.distances(counts)
    # ranks held: {-1/2} [0,1] {3/2} [2,4] [5,5] {11/2} {11/2} [6,9]
    want = [Fraction(x) for x in ("5", "3.5", "3", "0.5", "0.5", "1", "1", "1.5")]
    assert [Fraction(x, den) for x in d] == want
    assert m.gammas(counts) == [Fraction(1, 2) * x for x in want]


def test_descending_and_extreme_quantiles():
    counts = [0, 1, 1, 0]
    lo = QuantileEM(1.0, Fraction(0), Fraction(0), Fraction(4), bins=4)
    hi = QuantileEM(1.0, Fraction(1), Fraction(0), Fraction(4), bins=4)
    d, den = lo.distances(counts)
    assert [Fraction(x, den) for x in d] == [Fraction(1, 2), 0, 1, Fraction(3, 2)]
    d, den = hi.distances(counts)
    assert [Fraction(x, den) for x in d] == [Fraction(3, 2), 1, 0, Fraction(1, 2)]


@pytest.mark.parametrize("q, eps, rows, l0", [(Fraction(1, 2), 1.0, 1, 1), (Fraction(9, 10), 0.3, 2, 3)])
def test_choice_has_exactly_the_exponential_mechanisms_distribution(q, eps, rows, l0):
    m = QuantileEM(eps, q, Fraction(0), Fraction(1), rows=rows, l0=l0, bins=8)
    counts = [3, 0, 1, 4, 0, 2, 5, 1]
    g = m.gammas(counts)
    w = [math.exp(-float(x)) for x in g]
    p = [x / sum(w) for x in w]
    rng = SeededRng(7)
    n = 40000
    seen = [0] * 8
    for _ in range(n):
        seen[m.choose(counts, rng)] += 1
    chi = stats.chisquare(seen, [n * x for x in p])
    assert chi.pvalue > 1e-6, (seen, p)


def test_released_value_lies_in_the_chosen_bin():
    m = QuantileEM(5.0, Fraction(1, 2), Fraction(-10), Fraction(10), bins=4)
    rng = SeededRng(1)
    for b in range(4):
        for _ in range(50):
            v = m.value(b, rng)
            assert -10 + 5 * b <= v <= -10 + 5 * (b + 1)


def test_histogram_text():
    assert parse_histogram(None, 4) == [0, 0, 0, 0]
    assert parse_histogram("", 4) == [0, 0, 0, 0]
    assert parse_histogram("3:2,0:1", 4) == [1, 0, 0, 2]
    for bad in ("3:2,", "4:1", "a:1", "1:-1", "1", 7):
        with pytest.raises(InternalError):
            parse_histogram(bad, 4)


def test_accounting_and_accuracy():
    m = QuantileEM(0.8, Fraction(1, 2), Fraction(0), Fraction(100), rows=2, l0=4, bins=1024)
    assert m.eps_group == Fraction(0.8) / 4
    assert m.rho == 4 * (Fraction(0.8) / 4) ** 2 / 8 <= Fraction(0.8) ** 2 / 8
    assert m.scale == pytest.approx(2 * 2 / 0.2)
    assert m.half_width() == pytest.approx(20 * (math.log(1024) + math.log(20)))
    assert m.params()["mechanism"] == "exponential"


@pytest.mark.parametrize("bad", [{"epsilon": 0.0}, {"q": Fraction(3, 2)}, {"lo": Fraction(1), "hi": Fraction(1)},
                                 {"rows": 0}])
def test_parameters_are_checked(bad):
    args = {"epsilon": 1.0, "q": Fraction(1, 2), "lo": Fraction(0), "hi": Fraction(1)} | bad
    with pytest.raises(InvalidSetting):
        QuantileEM(**args)
