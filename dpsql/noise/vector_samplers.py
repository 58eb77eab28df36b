"""The discrete samplers of dpsql.noise.vector: n draws at once on numpy arrays, each with exactly
the law of its scalar counterpart in dpsql.noise.samplers, given uniform random words:

  - ``laplace(rng, n, lam)``: n integers with P(x) proportional to exp(-|x| * lam), lam a
    rational > 0: the law of ``samplers.discrete_laplace(1 / lam)``;
  - ``gaussian(rng, n, sigma)``: n integers with P(x) proportional to exp(-x^2 / (2 sigma^2)),
    sigma a whole number >= 1: the law of ``samplers.discrete_gaussian(sigma**2)``;
  - ``geometric(rng, n, lam)`` and ``words(rng, n)``, the steps they are built from.

The algorithms are Canonne, Kamath & Steinke 2020 (arXiv:2004.00010), Algorithms 1-3, in the
forms argued step by step below; draws differ from the scalar path's for the same seed, their
distribution does not (tests/stats/test_vector_noise.py checks both against the exact pmf and
against each other).

Exactness, the general rules (each step below names the rule it uses):

  R1 Random words. ``words(rng, n)`` are n independent uniform 64-bit words: the operating
     system's CSPRNG (os.urandom, as SecureRng; ``random.Random.randbytes`` for a SeededRng in
     tests). No float is made from them and no float takes part in any decision below.
  R2 Uniform below m (``uniform_below``): the low bitlen(m - 1) bits of a word, kept if < m, else drawn
     again (only the rejected elements). Conditioned on acceptance the kept value is uniform on
     [0, m); acceptance is > 1/2 per try. m above 2**64 falls back to ``rng.randbelow``.
  R3 Bernoulli(num/den), num <= den < 2**63 (``_ratio``): ``uniform_below(den) < num``.
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

Test: tests/noise/test_vector.py (support, determinism, forced ties and overflows),
tests/stats/test_vector_noise.py (distributions).
"""
from __future__ import annotations

import os
from fractions import Fraction
from math import floor

import numpy as np

from dpsql.errors import InternalError
from dpsql.noise.rng import Rng, SecureRng, SeededRng
from dpsql.noise.samplers import _bernoulli_exp

__all__ = ["gaussian", "geometric", "laplace", "words"]

LIMIT = 1 << 62                 # parameters and values below this keep every sum below 2**63
I64 = np.int64
U64 = np.uint64
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


def uniform_below(rng: Rng, m: int, n: int) -> np.ndarray:
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
    return uniform_below(rng, den, num.size) < num.astype(U64)


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
        top = U64(self.top)
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
        a = coin(active) & (uniform_below(rng, j * k, active.size) == 0)
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
    left = whole.astype(I64).copy()
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
    if m >= LIMIT:
        return None
    if m == 0:
        g = np.zeros(n, dtype=I64)
        active = np.arange(n)
        while active.size:
            ok = _exp_const(rng, active.size, lam)
            active = active[ok]
            g[active] += 1
        return g
    c = m * lam
    cc = _Const(c)
    b = np.zeros(n, dtype=I64)
    active = np.arange(n)
    while active.size:
        ok = _exp_const(rng, active.size, c)
        active = active[ok]
        b[active] += 1
    a = np.zeros(n, dtype=I64)
    pending = np.arange(n)
    while pending.size:
        u = uniform_below(rng, m, pending.size)           # < m < 2**62
        kept = _exp_le1(rng, pending.size, lambda idx: _ratio(rng, u[idx], m) & cc(rng, idx.size))
        a[pending[kept]] = u[kept].astype(I64)
        pending = pending[~kept]
    room = (np.iinfo(I64).max - a) // m          # B may be at most this for A + M B to fit
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
    out = np.zeros(n, dtype=I64)
    pending = np.arange(n)
    while pending.size:
        g = geometric(rng, pending.size, lam)
        if g is None:
            return None
        neg = uniform_below(rng, 2, pending.size) == 1
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
        big = np.array([abs(v) >= LIMIT for v in y], dtype=bool)
        yy = np.where(big, 0, y).astype(I64)
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
    if sigma >= LIMIT:
        return None
    out = np.zeros(n, dtype=I64)
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
