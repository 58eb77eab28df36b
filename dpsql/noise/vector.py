"""The exact samplers of dpsql.noise.samplers and dpsql.noise.exponential, run on numpy arrays.

Why. A query with many groups releases one noisy value per group and measure, and one
exponential-mechanism choice per group and quantile. The scalar samplers cost tens of
microseconds each in Python; here one batch of draws is a few dozen numpy passes, so a million
noisy values cost about a second (benchmarks/results/heavy_query.md).

What stays the same. Every function here returns draws from exactly the law its scalar
counterpart draws from, given uniform random words:

  - ``laplace(rng, n, lam)``: n integers with P(x) proportional to exp(-|x| * lam), lam a
    rational > 0: the law of ``samplers.discrete_laplace(1 / lam)``;
  - ``gaussian(rng, n, sigma)``: n integers with P(x) proportional to exp(-x^2 / (2 sigma^2)),
    sigma a whole number >= 1: the law of ``samplers.discrete_gaussian(sigma**2)``;
  - ``release_values(mech, values, rng)``: ``mech.release(v)`` for each v (Laplace, Gaussian,
    AnalyticGaussian of dpsql.noise.mechanisms);
  - ``release_quantiles(em, histograms, rng)``: ``em.release(h)`` for each h (QuantileEM).

The algorithms are Canonne, Kamath & Steinke 2020 (arXiv:2004.00010), Algorithms 1-3, in the
forms argued step by step below; draws differ from the scalar path's for the same seed, their
distribution does not (tests/stats/test_vector_noise.py checks both against the exact pmf and
against each other).

Exactness, the general rules (each step below names the rule it uses):

  R1 Random words. ``words(rng, n)`` are n independent uniform 64-bit words: the operating
     system's CSPRNG (os.urandom, as SecureRng; ``random.Random.randbytes`` for a SeededRng in
     tests). No float is made from them and no float takes part in any decision below.
  R2 Uniform below m (``_below``): the low bitlen(m - 1) bits of a word, kept if < m, else drawn
     again (only the rejected elements). Conditioned on acceptance the kept value is uniform on
     [0, m); acceptance is > 1/2 per try. m above 2**64 falls back to ``rng.randbelow``.
  R3 Bernoulli(num/den), num <= den < 2**63 (``_ratio``): ``_below(den) < num``.
  R4 Bernoulli(p) for a fixed rational p in [0, 1] of any size (``_const``): P = floor(p * 2**64)
     and the tail r = p * 2**64 - P in [0, 1) are computed once with Python integers; a word W
     gives True if W < P, False if W > P, and only if W == P (probability 2**-64) an exact
     Bernoulli(r) by ``rng.randbelow`` on Python integers. P(True) = P/2**64 + r/2**64 = p.
  R5 Independent coins multiply: Bernoulli(x) AND Bernoulli(y) drawn independently is
     Bernoulli(x*y). So Bernoulli(g/k) for a rational g = x*y*... and the step k of Algorithm 1
     needs only coins of 64-bit parameters.
  R6 Lockstep loops: every loop runs on the array of elements still pending, each element
     drawing fresh words in each round exactly as its scalar loop would; which elements are
     pending depends only on their own draws, so the elements are independent draws of the
     scalar law. Work stops when no element is pending.
  R7 Overflow: every int64/uint64 quantity is bounded below (stated beside it). Where a bound
     depends on a draw (a rare huge draw), that element is finished exactly with Python
     integers from the draws already made: never redrawn (redrawing only the large draws would
     change the law). Where a bound depends on the parameters alone (a scale of 2**62 or more),
     the whole call uses the scalar path.

Cancel and time limits: the callers (dpsql.session) draw in batches and check between batches;
nothing here blocks for long (a batch of 2**15 values is some milliseconds), and numpy's loops
and os.urandom release the GIL while they run.

Test: tests/noise/test_vector.py (support, determinism, forced ties and overflows),
tests/stats/test_vector_noise.py (distributions).
"""
from __future__ import annotations

import os
import re
from fractions import Fraction
from math import floor
from typing import Any, Sequence

import numpy as np

from dpsql.errors import InternalError
from dpsql.noise.rng import Rng, SecureRng, SeededRng
from dpsql.noise.samplers import _bernoulli_exp

__all__ = ["BATCH", "gaussian", "geometric", "laplace", "release_quantiles", "release_values", "words"]

BATCH = 1 << 15                  # values per batch (the callers check cancel between batches)
_LIMIT = 1 << 62                 # parameters and values below this keep every sum below 2**63
_I64 = np.int64
_U64 = np.uint64
_TWO64 = 1 << 64
_WORD = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}   # byte order is immaterial: bytes are uniform


# --- R1, R2, R3, R4: words and coins ------------------------------------------------------

def words(rng: Rng, n: int, size: int = 8) -> np.ndarray:
    """n uniform words of `size` bytes (1, 2, 4 or 8), read-only (R1): the CSPRNG for SecureRng,
    the seeded generator in tests. Distinct bytes of the source are independent and uniform, so
    a word of any width is uniform."""
    dtype = _WORD[size]
    if n <= 0:
        return np.zeros(0, dtype=dtype)
    if isinstance(rng, SecureRng):
        raw = os.urandom(size * n)
    elif isinstance(rng, SeededRng):
        raw = rng._random.randbytes(size * n)
    else:                                   # any other Rng: through its randbits
        raw = rng.randbits(8 * size * n).to_bytes(size * n, "little")
    return np.frombuffer(raw, dtype=dtype)


def _below(rng: Rng, m: int, n: int) -> np.ndarray:
    """n uniform integers in [0, m) (R2), as unsigned words of the narrowest width that holds
    m - 1 (fewer random bytes for small m); an object array of Python ints if m > 2**64."""
    if m <= 1:
        return np.zeros(n, dtype=np.uint8)
    if m > _TWO64:
        return np.array([rng.randbelow(m) for _ in range(n)], dtype=object)
    bits = (m - 1).bit_length()
    size = 1 if bits <= 8 else 2 if bits <= 16 else 4 if bits <= 32 else 8
    dtype = _WORD[size]
    mask = dtype((1 << bits) - 1)
    out = words(rng, n, size) & mask
    if m == 1 << bits:
        return out
    limit = dtype(m)
    bad = np.flatnonzero(out >= limit)
    while bad.size:
        w = words(rng, bad.size, size) & mask
        out[bad] = w
        bad = bad[w >= limit]
    return out


def _ratio(rng: Rng, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(num[i] / den) for each i (R3); 0 <= num <= den < 2**63."""
    return _below(rng, den, num.size) < num.astype(_U64)


class _Const:
    """Bernoulli(p) for a fixed rational p in [0, 1] (R4): P and the tail computed once."""

    __slots__ = ("p", "top", "tail")

    def __init__(self, p: Fraction):
        if not 0 <= p <= 1:
            raise InternalError("a coin's probability is outside [0, 1]")
        self.p = p
        scaled = p * _TWO64
        self.top = floor(scaled)                 # in [0, 2**64]; 2**64 only when p == 1
        self.tail = scaled - self.top            # in [0, 1)

    def __call__(self, rng: Rng, n: int) -> np.ndarray:
        if self.p == 0:
            return np.zeros(n, dtype=bool)
        if self.p == 1:
            return np.ones(n, dtype=bool)
        w = words(rng, n)
        top = _U64(self.top)
        out = w < top
        for i in np.flatnonzero(w == top):        # probability 2**-64 each: exact, in Python
            out[i] = rng.randbelow(self.tail.denominator) < self.tail.numerator
        return out


# --- CKS Algorithm 1: Bernoulli(exp(-gamma)) ------------------------------------------------

def _exp_le1(rng: Rng, n: int, coin, j: int = 1) -> np.ndarray:
    """Bernoulli(exp(-gamma_i)) for gamma_i = g_i / j in [0, 1], where coin(idx) draws
    Bernoulli(g_i) for the given element indices.

    CKS Alg. 1 (see samplers._bernoulli_exp_le1): A_k ~ Bernoulli(gamma/k) for k = 1, 2, ...
    until the first A_k = 0; True iff that k is odd. Here A_k = coin(g) AND Bernoulli(1/(j k)),
    independent, so P(A_k) = g/(j k) = gamma/k (R5); lockstep over the elements still drawing (R6).
    j k stays far below 2**63: P(k >= 30) < 1/29!."""
    out = np.zeros(n, dtype=bool)
    active = np.arange(n)
    k = 1
    while active.size:
        a = coin(active) & (_below(rng, j * k, active.size) == 0)
        if k % 2 == 1:
            out[active[~a]] = True
        active = active[a]
        k += 1
    return out


def _ones(idx: np.ndarray) -> np.ndarray:
    return np.ones(idx.size, dtype=bool)


def _exp_const(rng: Rng, n: int, gamma: Fraction) -> np.ndarray:
    """Bernoulli(exp(-gamma)) n times, for a fixed rational gamma >= 0 of any size.

    CKS Alg. 1 for gamma > 1: exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)), a product
    of independent coins (R5) stopped at the first failure; the exp(-1) coins are Algorithm 1 with
    g = 1, the last one with g = frac(gamma) drawn by R4."""
    whole = floor(gamma)
    frac = _Const(gamma - whole)
    out = np.ones(n, dtype=bool)
    active = np.arange(n)
    rounds = 0
    while active.size and rounds < whole:
        ok = _exp_le1(rng, active.size, _ones)
        out[active[~ok]] = False
        active = active[ok]
        rounds += 1
    if active.size and frac.p:
        ok = _exp_le1(rng, active.size, lambda idx: frac(rng, idx.size))
        out[active[~ok]] = False
    return out


def _exp_whole(rng: Rng, out: np.ndarray, whole: np.ndarray) -> None:
    """out[i] &= Bernoulli(exp(-whole[i])) for whole numbers whole[i] >= 0: whole[i] exp(-1) coins,
    stopping at the first failure (R5), lockstep (R6)."""
    left = whole.astype(_I64).copy()
    active = np.flatnonzero(out & (left > 0))
    while active.size:
        ok = _exp_le1(rng, active.size, _ones)
        out[active[~ok]] = False
        active = active[ok]
        left[active] -= 1
        active = active[left[active] > 0]


# --- CKS Algorithm 2: geometric and discrete Laplace ----------------------------------------

def geometric(rng: Rng, n: int, lam: Fraction) -> np.ndarray | None:
    """n draws of G >= 0 with P(G = g) proportional to exp(-g * lam), rational lam > 0; int64, or
    an object array of Python ints if a draw reached 2**63 (R7). None when 1/lam >= 2**62: the
    caller uses the scalar sampler (a fact of the parameters, never of a draw).

    Memorylessness: for M = floor(1/lam) >= 1, G = A + M*B with A in [0, M), P(A = a) proportional
    to exp(-a lam), and B >= 0, P(B = b) proportional to exp(-b M lam), independent: (a, b) -> a + M b
    is a bijection onto the whole numbers and exp(-a lam) exp(-b M lam) = exp(-(a + M b) lam). This
    is CKS Alg. 2's X = U + t V with the roles of t and s folded into lam, with c = M lam in (1/2, 1]:
      B counts successes of Bernoulli(exp(-c)) before the first failure (_exp_const, c <= 1);
      A is uniform on [0, M) (R2), kept with probability exp(-(A/M) c) by Algorithm 1 with
        g = (A/M) * c: a coin Bernoulli(A/M) (R3, M < 2**62) and a coin Bernoulli(c) (R4) (R5),
        drawn again until kept: accepted A has P(a) proportional to exp(-a lam); acceptance >= 1/e.
    For M = 0 (lam > 1) G counts successes of Bernoulli(exp(-lam)) directly (at most 1/(e - 1)
    expected rounds). A + M*B is computed in int64 while B <= (2**63 - 1 - A) // M (R7)."""
    if lam <= 0:
        raise InternalError("a geometric's rate must be > 0")
    m = floor(1 / lam)
    if m >= _LIMIT:
        return None
    if m == 0:
        g = np.zeros(n, dtype=_I64)
        active = np.arange(n)
        while active.size:
            ok = _exp_const(rng, active.size, lam)
            active = active[ok]
            g[active] += 1
        return g
    c = m * lam
    cc = _Const(c)
    b = np.zeros(n, dtype=_I64)
    active = np.arange(n)
    while active.size:
        ok = _exp_const(rng, active.size, c)
        active = active[ok]
        b[active] += 1
    a = np.zeros(n, dtype=_I64)
    pending = np.arange(n)
    while pending.size:
        u = _below(rng, m, pending.size)           # < m < 2**62
        kept = _exp_le1(rng, pending.size, lambda idx: _ratio(rng, u[idx], m) & cc(rng, idx.size))
        a[pending[kept]] = u[kept].astype(_I64)
        pending = pending[~kept]
    room = (np.iinfo(_I64).max - a) // m          # B may be at most this for A + M B to fit
    over = np.flatnonzero(b > room)
    g = a + m * np.minimum(b, room)
    if not over.size:
        return g
    g = g.astype(object)
    for i in over:                                 # exact, from the draws made (R7)
        g[i] = int(a[i]) + m * int(b[i])
    return g


def laplace(rng: Rng, n: int, lam: Fraction) -> np.ndarray | None:
    """n draws with P(x) proportional to exp(-|x| * lam), rational lam > 0 (int64, or object on
    overflow, R7); None when 1/lam >= 2**62 (scalar path).

    CKS Alg. 2's last step: a geometric magnitude and a fair sign, rejecting (negative, 0) so
    that 0 is not counted twice; rejected elements draw both again (R6)."""
    out = np.zeros(n, dtype=_I64)
    pending = np.arange(n)
    while pending.size:
        g = geometric(rng, pending.size, lam)
        if g is None:
            return None
        neg = _below(rng, 2, pending.size) == 1
        ok = ~(neg & (g == 0))
        vals = np.where(neg, -g, g)
        if vals.dtype == object and out.dtype != object:
            out = out.astype(object)
        out[pending[ok]] = vals[ok]
        pending = pending[~ok]
    return out


# --- CKS Algorithm 3: discrete Gaussian -----------------------------------------------------

def _gauss_accept(rng: Rng, y: np.ndarray, sigma: int) -> np.ndarray:
    """Bernoulli(exp(-(|y| - sigma)^2 / (2 sigma^2))) for each y (sigma < 2**62).

    With d = | |y| - sigma | = a sigma + r (0 <= r < sigma):
        d^2 / (2 sigma^2) = a^2/2 + a r / sigma + r^2 / (2 sigma^2),
    three non-negative terms, so the coin is the AND of independent Bernoulli(exp(-term)) (R5):
      a^2/2 = floor(a^2/2) + (a odd)/2:  floor(a^2/2) exp(-1) coins (_exp_whole), and for odd a
        Algorithm 1 with g = 1, j = 2;
      a r / sigma = (a r) // sigma + ((a r) mod sigma) / sigma: (a r) // sigma exp(-1) coins and
        Algorithm 1 with g = Bernoulli(rho / sigma) (R3);
      r^2 / (2 sigma^2): Algorithm 1 with g = Bernoulli(r/sigma) AND Bernoulli(r/sigma) (R5), j = 2.
    Bounds (R7): |y| < 2**63 and sigma < 2**62 so d < 2**63; a r < a sigma <= d < 2**63; a^2 < 2**63
    needs a <= 2**31, else (and for |y| >= 2**62, object draws) the element's coin is the scalar
    exact one, _bernoulli_exp(d^2, 2 sigma^2) on Python integers."""
    n = y.size
    out = np.ones(n, dtype=bool)
    if y.dtype == object:
        big = np.array([abs(v) >= _LIMIT for v in y], dtype=bool)
        yy = np.where(big, 0, y).astype(_I64)
    else:
        big = np.zeros(n, dtype=bool)
        yy = y
    d = np.abs(np.abs(yy) - sigma)
    a, r = d // sigma, d % sigma
    big |= a > (1 << 31)
    a = np.where(big, 0, a)
    for i in np.flatnonzero(big):                 # exact, in Python (R7)
        dd = abs(abs(int(y[i])) - sigma)
        out[i] = _bernoulli_exp(dd * dd, 2 * sigma * sigma, rng)
    ok = ~big
    ar = a * r
    _exp_whole(rng, out, np.where(ok, a * a // 2 + ar // sigma, 0))
    odd = np.flatnonzero(out & ok & (a % 2 == 1))
    if odd.size:
        out[odd] = _exp_le1(rng, odd.size, _ones, 2)
    live = np.flatnonzero(out & ok)
    rho = (ar % sigma)[live]
    out[live] = _exp_le1(rng, live.size, lambda idx: _ratio(rng, rho[idx], sigma))
    live = np.flatnonzero(out & ok)
    rr = r[live]
    out[live] = _exp_le1(rng, live.size, lambda idx: _ratio(rng, rr[idx], sigma) & _ratio(rng, rr[idx], sigma), 2)
    return out


def gaussian(rng: Rng, n: int, sigma: int) -> np.ndarray | None:
    """n draws with P(x) proportional to exp(-x^2 / (2 sigma^2)), sigma a whole number >= 1 (int64,
    or object on overflow); None when sigma >= 2**62 (scalar path).

    CKS Alg. 3 with t = sigma: propose Y from the discrete Laplace of scale t, accept with
    probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)). For any t > 0,
        exp(-|y|/t) * exp(-(|y| - sigma^2/t)^2/(2 sigma^2)) = exp(-y^2/(2 sigma^2)) * exp(-sigma^2/(2 t^2)),
    so accepted draws have exactly the discrete Gaussian law; CKS take t = floor(sigma) + 1 (the
    scalar path), here t = sigma, a whole number, which makes sigma^2/t = sigma and keeps the
    acceptance in 64-bit integers (_gauss_accept); the expected number of proposals is the same
    to within 1/sigma."""
    if not isinstance(sigma, int) or sigma < 1:
        raise InternalError("a discrete Gaussian's sigma must be a whole number >= 1")
    if sigma >= _LIMIT:
        return None
    out = np.zeros(n, dtype=_I64)
    pending = np.arange(n)
    lam = Fraction(1, sigma)
    while pending.size:
        y = laplace(rng, pending.size, lam)
        ok = _gauss_accept(rng, y, sigma)
        if y.dtype == object and out.dtype != object:
            out = out.astype(object)
        out[pending[ok]] = y[ok]
        pending = pending[~ok]
    return out


# --- mechanisms: snap, noise, unsnap (dpsql.noise.mechanisms) -------------------------------

def _snapped(values: Sequence[Any], k: int, divisor) -> np.ndarray:
    """round(v / divisor / 2**k) for each true value (None is 0), as mechanisms._snap: int64 when
    every one is below 2**62 in magnitude, else an object array of Python ints (R7).

    Python ints with divisor 1 are shifted in int64 when |v| < 2**(62 + k) (k < 0: v * 2**-k exact),
    or rounded half to even by integer arithmetic (k >= 0); anything else (Decimal, float, a
    divisor) goes through the scalar _snap on exact rationals."""
    from dpsql.noise.mechanisms import _snap

    n = len(values)
    if divisor == 1 and all(type(v) is int or v is None for v in values):
        ints = [0 if v is None else v for v in values]
        if k < 0 and k > -62:
            bound = 1 << (62 + k)
            if all(-bound < v < bound for v in ints):
                return np.array(ints, dtype=_I64) * _I64(1 << -k)
        elif 0 <= k < 62 and all(-_LIMIT < v < _LIMIT for v in ints):
            x = np.array(ints, dtype=_I64)
            q = x >> _I64(k)                                   # floor(x / 2**k): arithmetic shift
            rem = x - q * _I64(1 << k)                         # in [0, 2**k)
            half = 1 << k >> 1
            up = (rem > half) | ((rem == half) & (k > 0) & (q % 2 == 1))
            return q + up
    out = [_snap(Fraction(0 if v is None else v) / divisor, k) for v in values]
    if all(-_LIMIT < v < _LIMIT for v in out):
        return np.array(out, dtype=_I64)
    arr = np.empty(n, dtype=object)
    arr[:] = out
    return arr


def _unsnapped(total: np.ndarray, k: int) -> list[float]:
    """float(n * 2**k), correctly rounded, as mechanisms._unsnap: int64 |n| < 2**63 with
    -1000 < k < 0 converts to the nearest double (ties to even, IEEE's default and Python's
    int / int) and scales by a power of two, exact for normal results; anything else in Python."""
    from dpsql.noise.mechanisms import _unsnap

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
        from dpsql.noise.exponential import parse_histogram

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
        items = np.array([texts[i].count(",") + 1 for i in good], dtype=_I64)
        try:
            nums = np.array(",".join([texts[i] for i in good]).replace(":", ",").split(","), dtype=_I64) \
                if good else np.zeros(0, dtype=_I64)
        except OverflowError:                    # a count of 2**63 or more: those texts one by one
            nums = None
        if nums is None:
            grp_list, bs_list, cs_list = [], [], []
            for i in good:
                v = list(map(int, _SPLIT.split(texts[i])))
                grp_list.extend([i] * (len(v) // 2))
                bs_list.extend(v[0::2])
                cs_list.extend(min(c, _COUNT_LIMIT) for c in v[1::2])
            grp = np.array(grp_list, dtype=_I64)
            b_arr, count = np.array(bs_list, dtype=_I64), np.array(cs_list, dtype=_I64)
        else:
            grp = np.repeat(np.array(good, dtype=_I64), items)
            b_arr, count = nums[0::2], nums[1::2]
        outside = np.flatnonzero(b_arr >= bins)
        if outside.size:
            parse_histogram(texts[int(grp[outside[0]])], bins)    # a bin past B: refused (InternalError)
        odd = np.zeros(g, dtype=bool)            # more than 2**20 items, or a count of 2**40 or more
        odd[np.array(good, dtype=_I64)[items > _ITEM_LIMIT]] = True
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
        self.prefix = np.concatenate([np.zeros(1, dtype=_I64), np.cumsum(self.count)])
        gid = self.key // bins
        self.start = np.searchsorted(gid, np.arange(g + 1))           # entries of group i: start[i]:start[i+1]
        self.n = self.prefix[self.start[1:]] - self.prefix[self.start[:-1]]
        too_big = np.flatnonzero(em.q.denominator * (2 * self.n + 2) >= _LIMIT)
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
    h = (c > 0).astype(_I64)
    left = qden * (2 * below + h - 1)
    right = qden * (2 * below + 2 * c - 1 - h)
    return np.where(left > t2, left - t2, np.where(t2 > right, t2 - right, 0))


def _least(em, hs: _Hists) -> np.ndarray:
    """min over the B bins of each group's D_b: over its non-empty bins and, for each run of empty
    bins (before a non-empty bin, after the last one, or all B if none), that run's one distance."""
    g, bins = hs.groups, hs.bins
    best = np.full(g, np.iinfo(_I64).max, dtype=_I64)
    gid = hs.key // bins
    b = hs.key % bins
    below = hs.prefix[:-1] - hs.prefix[hs.start[gid]]
    np.minimum.at(best, gid, _distance(em, hs.n[gid], hs.count, below))
    first = np.zeros(gid.size, dtype=bool)
    first[hs.start[:-1][hs.start[:-1] < hs.start[1:]]] = True
    prev = np.where(first, -1, np.concatenate([np.zeros(1, dtype=_I64), b[:-1]]))
    gap = b > prev + 1                             # empty bins just below this one
    np.minimum.at(best, gid[gap], _distance(em, hs.n[gid[gap]], np.zeros(int(gap.sum()), dtype=_I64), below[gap]))
    last = np.full(g, -1, dtype=_I64)              # each group's last non-empty bin (-1: none)
    ends = hs.start[1:] > hs.start[:-1]
    last[ends] = b[hs.start[1:][ends] - 1]
    tail = np.flatnonzero(last < bins - 1)         # empty bins above the last (all, if none)
    np.minimum.at(best, tail, _distance(em, hs.n[tail], np.zeros(tail.size, dtype=_I64), hs.n[tail]))
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
    out = np.zeros(hs.groups, dtype=_I64)
    pending = np.arange(hs.groups)
    block = 1
    while pending.size:
        p = pending.size
        grp = np.repeat(pending, block)
        b = _below(rng, hs.bins, p * block).astype(_I64)
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
    u = (words(rng, chosen.size) >> _U64(11)).tolist()
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
