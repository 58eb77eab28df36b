"""The exact samplers of dpsql.noise.samplers and dpsql.noise.exponential, run on numpy arrays.

Why. A query with many groups releases one noisy value per group and measure, and one
exponential-mechanism choice per group and quantile. The scalar samplers cost tens of
microseconds each in Python; here one batch of draws is a few dozen numpy passes, so a million
noisy values cost about a second (benchmarks/results/heavy_query.md).

What stays the same. Every function here (and in dpsql.noise.vector_samplers) returns draws from
exactly the law its scalar counterpart draws from, given uniform random words:

  - ``laplace(rng, n, lam)``: n integers with P(x) proportional to exp(-|x| * lam), lam a
    rational > 0: the law of ``samplers.discrete_laplace(1 / lam)``;
  - ``gaussian(rng, n, sigma)``: n integers with P(x) proportional to exp(-x^2 / (2 sigma^2)),
    sigma a whole number >= 1: the law of ``samplers.discrete_gaussian(sigma**2)``;
  - ``release_values(mech, values, rng)``: ``mech.release(v)`` for each v (Laplace, Gaussian,
    AnalyticGaussian of dpsql.noise.mechanisms);
  - ``release_quantiles(em, histograms, rng)``: ``em.release(h)`` for each h (QuantileEM).

The draws themselves are dpsql.noise.vector_samplers (Canonne, Kamath & Steinke 2020, with the
exactness rules R1-R7 that the steps below cite).

Cancel and time limits: the callers (dpsql.release) draw in batches and check between batches;
nothing here blocks for long (a batch of 2**15 values is some milliseconds), and numpy's loops
and os.urandom release the GIL while they run.

Test: tests/noise/test_vector.py (support, determinism, forced ties and overflows),
tests/stats/test_vector_noise.py (distributions).
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from dpsql.errors import InternalError
from dpsql.noise.exponential import parse_histogram
from dpsql.noise.mechanisms import _snap, _unsnap
from dpsql.noise.rng import Rng
from dpsql.noise.vector_samplers import I64, LIMIT, U64, gaussian, geometric, laplace, uniform_below, words

__all__ = ["BATCH", "release_quantiles", "release_values"]

BATCH = 1 << 15                  # values per batch (the callers check cancel between batches)


# --- mechanisms: snap, noise, unsnap (dpsql.noise.mechanisms) -------------------------------

def _snapped(values: Sequence[Any], k: int, divisor) -> np.ndarray:
    """round(v / divisor / 2**k) for each true value (None is 0), as mechanisms._snap: int64 when
    every one is below 2**62 in magnitude, else an object array of Python ints (R7).

    Python ints with divisor 1 are shifted in int64 when |v| < 2**(62 + k) (k < 0: v * 2**-k exact),
    or rounded half to even by integer arithmetic (k >= 0); anything else (Decimal, float, a
    divisor) goes through the scalar _snap on exact rationals."""
    n = len(values)
    if divisor == 1 and all(type(v) is int or v is None for v in values):
        ints = [0 if v is None else v for v in values]
        if k < 0 and k > -62:
            bound = 1 << (62 + k)
            if all(-bound < v < bound for v in ints):
                return np.array(ints, dtype=I64) * I64(1 << -k)
        elif 0 <= k < 62 and all(-LIMIT < v < LIMIT for v in ints):
            x = np.array(ints, dtype=I64)
            q = x >> I64(k)                                   # floor(x / 2**k): arithmetic shift
            rem = x - q * I64(1 << k)                         # in [0, 2**k)
            half = 1 << k >> 1
            up = (rem > half) | ((rem == half) & (k > 0) & (q % 2 == 1))
            return q + up
    if type(divisor) is int and divisor > 1 and all(type(v) is int or v is None for v in values):
        fast = _snapped_over(values, k, divisor)
        if fast is not None:
            return fast
    out = [_snap(Fraction(0 if v is None else v) / divisor, k) for v in values]
    if all(-LIMIT < v < LIMIT for v in out):
        return np.array(out, dtype=I64)
    arr = np.empty(n, dtype=object)
    arr[:] = out
    return arr


def _snapped_over(values: Sequence[Any], k: int, divisor: int) -> np.ndarray | None:
    """round(v / (divisor * 2**k)) to the nearest integer, ties to even, for Python ints v (None
    is 0) and an integer divisor > 1 (a fixed-point sum's scale), by int64 arithmetic: the
    exact quotient n / d with n = v * 2**-k, d = divisor (k < 0) or n = v, d = divisor * 2**k
    (k >= 0); q = floor(n / d) and r = n - q * d in [0, d), rounded up when 2r > d or 2r = d with
    q odd: mechanisms._snap's round(Fraction) exactly. None (the scalar path) when n or d would
    not stay below 2**62 in magnitude, so that no product, 2r or q + 1 overflows int64."""
    ints = [0 if v is None else v for v in values]
    if -62 < k < 0:
        bound, d = 1 << (62 + k), divisor
    elif 0 <= k < 62 and divisor < (1 << (62 - k)):
        bound, d = LIMIT, divisor << k
    else:
        return None
    if d >= LIMIT or not all(-bound < v < bound for v in ints):
        return None
    n = np.array(ints, dtype=I64)
    if k < 0:
        n = n * I64(1 << -k)
    q = np.floor_divide(n, I64(d))
    twice = (n - q * I64(d)) * I64(2)                          # 2r, in [0, 2d)
    up = (twice > d) | ((twice == d) & (q % 2 == 1))
    return q + up


def _unsnapped(total: np.ndarray, k: int) -> list[float]:
    """float(n * 2**k), correctly rounded, as mechanisms._unsnap: int64 |n| < 2**63 with
    -1000 < k < 0 converts to the nearest double (ties to even, IEEE's default and Python's
    int / int) and scales by a power of two, exact for normal results; anything else in Python."""
    if total.dtype != object and -1000 < k < 0:
        return np.ldexp(total.astype(np.float64), k).tolist()
    return [_unsnap(int(v), k) for v in total]


def release_values(mech, values: Sequence[Any], rng: Rng, divisor=1) -> list[float]:
    """mech.release(v / divisor) for each true value v (None is 0), same law (module docstring).

    Laplace: noise with P(z) proportional to exp(-|z| / grid_scale), lam = 1 / grid_scale;
    Gaussian and AnalyticGaussian: the discrete Gaussian of sigma = grid_sigma grid units. The
    scalar release is used for parameters beyond 2**62 grid units (R7)."""
    n = len(values)
    if n == 0:
        return []
    name = mech.name
    if name == "laplace":
        noise = laplace(rng, n, 1 / mech._grid_scale)
    elif name in ("gaussian", "gaussian_classic"):
        noise = gaussian(rng, n, mech._grid_sigma)
    else:
        raise InternalError(f"no batch release for the {name} mechanism")
    if noise is None:
        return [mech.release(Fraction(0 if v is None else v) / divisor, rng) for v in values]
    snapped = _snapped(values, mech._k, divisor)
    if snapped.dtype == object or noise.dtype == object:
        total = np.empty(n, dtype=object)
        total[:] = [int(x) + int(z) for x, z in zip(snapped, noise)]
    else:
        total = snapped + noise                      # both below 2**62 in magnitude
    return _unsnapped(total, mech._k)


# --- the exponential mechanism for quantiles (dpsql.noise.exponential) ----------------------
#
# A histogram of B = 1024 bins usually has few non-empty ones, and an empty bin's distance is a
# function of how many values lie below it, the same for a whole run of empty bins. So nothing
# here is done per bin: each batch keeps the non-empty bins of all its groups in one sorted array
# (key = group * B + bin), and a proposed bin's distance is computed from its count (0 if absent)
# and the sum of the counts below it, found by binary search. The integers are those of
# QuantileEM.distances, bin by bin.

_HIST = re.compile(r"\d{1,7}:\d{1,19}(?:,\d{1,7}:\d{1,19})*")
_SPLIT = re.compile(r"[:,]")
_COUNT_LIMIT = 1 << 40          # counts per bin below this, and at most 2**20 items, keep n < 2**60
_ITEM_LIMIT = 1 << 20


class _Hists:
    """The non-empty bins of a batch of histograms, sorted by (group, bin), duplicates summed."""

    __slots__ = ("groups", "bins", "key", "count", "prefix", "start", "n", "scalar")

    def __init__(self, em, texts: Sequence[Any]):
        """Rows the vector path leaves to the scalar release (scalar): texts of another form (the
        scalar parser then reads or refuses them: exponential.parse_histogram), counts of 2**40 or
        more or over 2**20 items, and an n too large for int64 distances (2 qden (n + 1) >= 2**62)."""
        g, bins = len(texts), em.bins
        scalar = []
        # The well-formed texts, parsed at once: one string of all their numbers, read by numpy
        # (decimal digits only, as the pattern checked), with each item's group beside it.
        good = []
        for i, t in enumerate(texts):
            if t is None or t == "":
                continue
            if isinstance(t, str) and _HIST.fullmatch(t):
                good.append(i)
            else:
                parse_histogram(t, bins)         # refuses a malformed text as the scalar path does
                scalar.append(i)
        items = np.array([texts[i].count(",") + 1 for i in good], dtype=I64)
        try:
            nums = np.array(",".join([texts[i] for i in good]).replace(":", ",").split(","), dtype=I64) \
                if good else np.zeros(0, dtype=I64)
        except OverflowError:                    # a count of 2**63 or more: those texts one by one
            nums = None
        if nums is None:
            grp_list, bs_list, cs_list = [], [], []
            for i in good:
                v = list(map(int, _SPLIT.split(texts[i])))
                grp_list.extend([i] * (len(v) // 2))
                bs_list.extend(v[0::2])
                cs_list.extend(min(c, _COUNT_LIMIT) for c in v[1::2])
            grp = np.array(grp_list, dtype=I64)
            b_arr, count = np.array(bs_list, dtype=I64), np.array(cs_list, dtype=I64)
        else:
            grp = np.repeat(np.array(good, dtype=I64), items)
            b_arr, count = nums[0::2], nums[1::2]
        outside = np.flatnonzero(b_arr >= bins)
        if outside.size:
            parse_histogram(texts[int(grp[outside[0]])], bins)    # a bin past B: refused (InternalError)
        odd = np.zeros(g, dtype=bool)            # more than 2**20 items, or a count of 2**40 or more
        odd[np.array(good, dtype=I64)[items > _ITEM_LIMIT]] = True
        odd[grp[count >= _COUNT_LIMIT]] = True
        if odd.any():
            keep = ~odd[grp]
            grp, b_arr, count = grp[keep], b_arr[keep], count[keep]
            scalar.extend(np.flatnonzero(odd).tolist())
        key = grp * bins + b_arr
        order = np.argsort(key, kind="stable")
        key, count = key[order], count[order]
        firsts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if key.size else order
        key = key[firsts]
        summed = np.add.reduceat(count, firsts) if key.size else count   # a bin listed twice: its counts summed
        nonzero = summed > 0                       # a bin listed with count 0 is an empty bin
        self.key, self.count = key[nonzero], summed[nonzero]
        self.groups, self.bins = g, bins
        self.prefix = np.concatenate([np.zeros(1, dtype=I64), np.cumsum(self.count)])
        gid = self.key // bins
        self.start = np.searchsorted(gid, np.arange(g + 1))           # entries of group i: start[i]:start[i+1]
        self.n = self.prefix[self.start[1:]] - self.prefix[self.start[:-1]]
        too_big = np.flatnonzero(em.q.denominator * (2 * self.n + 2) >= LIMIT)
        self.scalar = sorted(set(scalar) | set(too_big.tolist()))

    def at(self, group: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(c_b, below_b) of bin b of each group: its count and the sum of the counts below it."""
        key = group * self.bins + b
        pos = np.searchsorted(self.key, key)
        hit = pos < self.key.size
        hit[hit] = self.key[pos[hit]] == key[hit]
        c = np.where(hit, self.count[np.minimum(pos, max(self.key.size - 1, 0))] if self.key.size else 0, 0)
        below = self.prefix[pos] - self.prefix[self.start[group]]
        return c, below


def _distance(em, n: np.ndarray, c: np.ndarray, below: np.ndarray) -> np.ndarray:
    """QuantileEM.distances' D_b (over den = 2 qden) for bins of count c with `below` values below
    them in a group of n values, elementwise. |terms| <= qden (2n + 2) < 2**62 (larger n: scalar)."""
    a, qden = em.q.numerator, em.q.denominator
    t2 = 2 * a * (n - 1)
    h = (c > 0).astype(I64)
    left = qden * (2 * below + h - 1)
    right = qden * (2 * below + 2 * c - 1 - h)
    return np.where(left > t2, left - t2, np.where(t2 > right, t2 - right, 0))


def _least(em, hs: _Hists) -> np.ndarray:
    """min over the B bins of each group's D_b: over its non-empty bins and, for each run of empty
    bins (before a non-empty bin, after the last one, or all B if none), that run's one distance."""
    g, bins = hs.groups, hs.bins
    best = np.full(g, np.iinfo(I64).max, dtype=I64)
    gid = hs.key // bins
    b = hs.key % bins
    below = hs.prefix[:-1] - hs.prefix[hs.start[gid]]
    np.minimum.at(best, gid, _distance(em, hs.n[gid], hs.count, below))
    first = np.zeros(gid.size, dtype=bool)
    first[hs.start[:-1][hs.start[:-1] < hs.start[1:]]] = True
    prev = np.where(first, -1, np.concatenate([np.zeros(1, dtype=I64), b[:-1]]))
    gap = b > prev + 1                             # empty bins just below this one
    np.minimum.at(best, gid[gap], _distance(em, hs.n[gid[gap]], np.zeros(int(gap.sum()), dtype=I64), below[gap]))
    last = np.full(g, -1, dtype=I64)              # each group's last non-empty bin (-1: none)
    ends = hs.start[1:] > hs.start[:-1]
    last[ends] = b[hs.start[1:][ends] - 1]
    tail = np.flatnonzero(last < bins - 1)         # empty bins above the last (all, if none)
    np.minimum.at(best, tail, _distance(em, hs.n[tail], np.zeros(tail.size, dtype=I64), hs.n[tail]))
    return best


def _choose(em, hs: _Hists, rng: Rng) -> np.ndarray | None:
    """The chosen bin of each group: P(b) proportional to exp(-lam (D_b - min D)), lam = eps_g / (2 m den),
    the law of QuantileEM.choose; None when 1/lam >= 2**62 (scalar path).

    The scalar path proposes b uniformly and accepts with probability exp(-lam delta_b) (exact
    Bernoulli). Here the acceptance is "G >= delta_b" for a fresh geometric G with
    P(G = g) proportional to exp(-g lam) (geometric above): P(G >= delta) = exp(-lam delta), the same
    probability. Each round a pending group draws a block of iid (proposal, G) pairs and takes the
    first accepted one: the first success of an iid sequence, which the block only computes ahead
    (the unused pairs are discarded whatever they hold). Blocks double per round (1, 2, 4, .. 64)
    so that a group needing many proposals takes few rounds."""
    lam = Fraction(em._c.numerator, em._c.denominator * 2 * em.q.denominator)
    least = _least(em, hs)
    out = np.zeros(hs.groups, dtype=I64)
    pending = np.arange(hs.groups)
    block = 1
    while pending.size:
        p = pending.size
        grp = np.repeat(pending, block)
        b = uniform_below(rng, hs.bins, p * block).astype(I64)
        geo = geometric(rng, p * block, lam)
        if geo is None:
            return None
        c, below = hs.at(grp, b)
        need = _distance(em, hs.n[grp], c, below) - least[grp]
        hit = (geo >= need)
        if hit.dtype == object:
            hit = hit.astype(bool)
        hit = hit.reshape(p, block)
        any_hit = hit.any(axis=1)
        first = hit.argmax(axis=1)
        out[pending[any_hit]] = b.reshape(p, block)[any_hit, first[any_hit]]
        pending = pending[~any_hit]
        block = min(block * 2, 64)
    return out


def _values(em, chosen: np.ndarray, rng: Rng) -> list[float]:
    """QuantileEM.value for each chosen bin: min(hi, lo + (b + U/2**53) w), U 53 uniform bits (the
    top bits of a word, R1), as one exact rational per value: (N0 + (b 2**53 + U) N1) / den, the
    correctly rounded quotient of Python integers (as float(Fraction)); min with float(hi) after
    rounding is the same, rounding being monotone."""
    lo, hi = em.lo, em.hi
    w = (hi - lo) / em.bins
    den = lo.denominator * w.denominator << 53
    n0 = lo.numerator * w.denominator << 53
    n1 = w.numerator * lo.denominator
    top = float(hi)
    u = (words(rng, chosen.size) >> U64(11)).tolist()
    return [min(top, (n0 + ((b << 53) | x) * n1) / den) for b, x in zip(chosen.tolist(), u)]


def release_quantiles(em, histograms: Sequence[Any], rng: Rng) -> list[float]:
    """em.release(h) for each histogram text h, the same law (module docstring)."""
    if not histograms:
        return []
    hs = _Hists(em, histograms)
    chosen = _choose(em, hs, rng)
    if chosen is None:
        return [em.release(h, rng) for h in histograms]
    out = _values(em, chosen, rng)
    for i in hs.scalar:                           # exact, in Python, with fresh draws (R7)
        out[i] = em.release(histograms[i], rng)
    return out
