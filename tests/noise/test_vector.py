"""dpsql.noise.vector, deterministically: support, determinism under a seed, equality with the scalar
path's integers (distances, snapping, float conversion), and the exact fallbacks (R4 ties, R7
overflows) forced with crafted words or parameters. Its laws: tests/stats/test_vector_noise.py."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from dpsql.errors import InternalError
from dpsql.noise import SeededRng, make_mechanism
from dpsql.noise import vector as V
from dpsql.noise import vector_samplers as S
from dpsql.noise.exponential import QuantileEM, parse_histogram
from dpsql.noise.mechanisms import _snap, _unsnap


class _Words:
    """An Rng (not SecureRng nor SeededRng, so vector_samplers.words reads its randbits) whose 64-bit words
    are all `word`; randbelow from a seeded generator, counted."""

    def __init__(self, word: int, seed: int = 1):
        self.word, self.r, self.below = word, random.Random(seed), 0

    def randbits(self, k: int) -> int:
        assert k % 64 == 0
        return int.from_bytes(self.word.to_bytes(8, "little") * (k // 64), "little")

    def randbelow(self, n: int) -> int:
        self.below += 1
        return self.r.randrange(n)


def test_seeded_draws_are_reproducible_and_integers():
    for f in (lambda r: S.laplace(r, 500, Fraction(2, 3)), lambda r: S.gaussian(r, 500, 3),
              lambda r: S.geometric(r, 500, Fraction(5, 2)), lambda r: S.gaussian(r, 500, 2**45 + 1)):
        a, b = f(SeededRng(11)), f(SeededRng(11))
        assert a.dtype == np.int64 and (a == b).all()
    assert (S.geometric(SeededRng(3), 1000, Fraction(1, 7)) >= 0).all()
    assert S.laplace(SeededRng(3), 0, Fraction(1)).size == 0


def test_parameters_beyond_2_62_leave_the_batch_to_the_scalar_path():
    assert S.geometric(SeededRng(1), 3, Fraction(1, 2**62)) is None
    assert S.gaussian(SeededRng(1), 3, 2**62) is None
    m = make_mechanism("laplace", 1.0, 1e-30)          # 2**40 / 1e-30 grid units: scalar
    out = V.release_values(m, [5, 7], SeededRng(2))
    assert len(out) == 2 and all(isinstance(x, float) for x in out)


def test_a_tie_with_the_probabilitys_top_word_is_decided_exactly():
    """R4: a word equal to floor(p 2**64) is resolved by an exact Bernoulli of the tail."""
    p = Fraction(1, 3)
    coin = S._Const(p)
    rng = _Words(coin.top)                               # every word ties
    hits = coin(rng, 3000)
    assert rng.below == 3000                             # all by the exact path
    assert coin.tail == Fraction(1, 3)                   # 2**64 = 1 (mod 3)
    assert 800 < hits.sum() < 1200                       # Bernoulli(1/3): 1000 +- 7 sigma
    assert not S._Const(p)(_Words(coin.top + 1), 50).any()
    assert S._Const(p)(_Words(coin.top - 1), 50).all()


def test_geometric_draws_past_2_63_are_exact_python_integers():
    """R7: with M = 2**62 - 2**40 a draw overflows when B >= 3 (e**-3 of them): finished exactly."""
    lam = Fraction(1, 2**62 - 2**40)
    g = S.geometric(SeededRng(5), 2000, lam)
    assert g.dtype == object
    big = [x for x in g if x >= 2**63]
    assert big and all(isinstance(x, int) for x in g)
    lap = S.laplace(SeededRng(5), 2000, lam)
    assert lap.dtype == object and any(abs(x) >= 2**63 for x in lap)


def test_gaussian_acceptance_of_huge_proposals_goes_to_python(monkeypatch):
    """R7: |y| >= 2**62 (object draws) and a = d // sigma > 2**31 use the scalar exact coin."""
    calls = []
    real = S._bernoulli_exp

    def counted(num, den, rng):
        calls.append((num, den))
        return real(num, den, rng)

    monkeypatch.setattr(S, "_bernoulli_exp", counted)
    y = np.empty(4, dtype=object)
    y[:] = [2**70, -(2**65), 3, 0]
    out = S._gauss_accept(SeededRng(1), y, 5)
    assert len(calls) == 2 and not out[0] and not out[1]
    calls.clear()
    out = S._gauss_accept(SeededRng(1), np.array([7 * 2**33, 1], dtype=np.int64), 2)
    assert len(calls) == 1 and not out[0]


def test_snapping_and_float_conversion_equal_the_scalar_path():
    r = random.Random(4)
    for k in (-40, -3, 0, 5):
        values = [r.randrange(-10**6, 10**6) for _ in range(300)] + [None, 0, 2**21, -(2**21)]
        got = V._snapped(values, k, 1)
        assert got.tolist() == [_snap(Fraction(v or 0), k) for v in values]
    dec = [Fraction(7, 3), 1.25, None, 10**30]
    got = V._snapped(dec, -40, Fraction(3))
    assert got.dtype == object
    assert list(got) == [_snap(Fraction(v or 0) / 3, -40) for v in dec]
    ints = [r.randrange(-(2**62), 2**62) for _ in range(2000)]
    ints += [2**53 + 1, 2**53 + 3, -(2**53 + 1), 2**60 + 2**7, 2**60 + 3 * 2**7, 1, -1, 0]    # ties
    for k in (-40, -1):
        assert V._unsnapped(np.array(ints, dtype=np.int64), k) == [_unsnap(v, k) for v in ints]
    huge = np.empty(2, dtype=object)
    huge[:] = [2**80 + 1, -(2**70)]
    assert V._unsnapped(huge, -40) == [_unsnap(2**80 + 1, -40), _unsnap(-(2**70), -40)]


def test_snapping_over_an_integer_divisor_equals_the_scalar_path():
    """A fixed-point sum's values (Python ints over the measure's scale) snap in int64, exactly as
    the scalar path's round(Fraction(v) / divisor / 2**k), ties to even included."""
    r = random.Random(5)
    for divisor in (10**6, 3, 7, 2, 10**12):
        for k in (-45, -20, -3, -1, 0, 1, 5, 30):
            top = 1 << min(60 + k, 56) if k < 0 else 10**15           # within the int64 path's reach
            values = [r.randrange(-top, top) for _ in range(300)] + [None, 0, 1, -1]
            values += [divisor * j + divisor // 2 * (1 << max(k, 0)) for j in range(-3, 4)]   # ties near 0
            values += [(2 * j + 1) * divisor << max(k, 0) >> 1 for j in range(-4, 4)]
            got = V._snapped(values, k, divisor)
            assert got.dtype != object, (divisor, k)
            assert got.tolist() == [_snap(Fraction(v or 0) / divisor, k) for v in values], (divisor, k)
    big = [2**61, -(2**61)]                             # beyond the int64 path at k = -5: the scalar path
    assert list(V._snapped(big, -5, 10**6)) == [_snap(Fraction(v) / 10**6, -5) for v in big]


def test_released_values_lie_on_the_grid():
    for kind in ("laplace", "gaussian"):
        m = make_mechanism(kind, 1.0, 0.5, 1e-6)
        values = [0, 5, None, 2**30, Fraction(1, 3)]
        out = V.release_values(m, values, SeededRng(9))
        for v in out:
            assert (Fraction(v) / Fraction(2) ** m.k).denominator == 1
        assert abs(out[3] - 2**30) < 50 * m.scale


def test_quantile_distances_and_minimum_equal_the_scalar_ones():
    r = random.Random(1)
    for q in (Fraction(0), Fraction(1), Fraction(1, 2), Fraction(1, 10), Fraction(7, 9)):
        em = QuantileEM(0.7, q, Fraction(0), Fraction(100), bins=16)
        texts = []
        for _ in range(300):
            items = [(r.randrange(16), r.choice([0, 1, 2, 7])) for _ in range(r.choice([0, 1, 2, 5, 16]))]
            texts.append(",".join(f"{b}:{c}" for b, c in items) if items else r.choice([None, ""]))
        hs = V._Hists(em, texts)
        least = V._least(em, hs)
        for i, t in enumerate(texts):
            d, _ = em.distances(parse_histogram(t, 16))
            c, below = hs.at(np.full(16, i), np.arange(16))
            assert V._distance(em, hs.n[np.full(16, i)], c, below).tolist() == d
            assert least[i] == min(d)


def test_quantile_release_support_and_fallbacks():
    em = QuantileEM(1.0, Fraction(1, 2), Fraction(-10), Fraction(10), bins=8)
    texts = ["0:3,5:1", None, "", "7:1", f"2:{2**41}", "1:1,1:2"]
    out = V.release_quantiles(em, texts, SeededRng(3))
    assert len(out) == 6 and all(-10 <= v <= 10 for v in out)
    assert V._Hists(em, texts).scalar == [4]                 # a count of 2**41: the scalar path
    with pytest.raises(InternalError):
        V.release_quantiles(em, ["0:1", "9:1"], SeededRng(3))  # bin 9 of 8
    with pytest.raises(InternalError):
        V.release_quantiles(em, ["a:1"], SeededRng(3))
    assert V.release_quantiles(em, ["1:2"] * 5, SeededRng(8)) == V.release_quantiles(em, ["1:2"] * 5, SeededRng(8))
