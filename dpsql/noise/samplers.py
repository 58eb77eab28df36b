"""Exact samplers for integer noise: Bernoulli(exp(-gamma)), discrete Laplace, discrete Gaussian.

Source: C. Canonne, G. Kamath & T. Steinke, "The Discrete Gaussian for Differential
Privacy", NeurIPS 2020 (arXiv:2004.00010), Algorithms 1-3. Written here from the
paper, not copied from an implementation.

Every sampler is *exact*: given a perfect source of uniform integers it returns
draws from exactly the stated distribution. All arithmetic is on Python ints
(parameters may be given as ``int`` or ``fractions.Fraction``); no float is
touched, so nothing here can leak the low-order bits a floating-point sampler
leaks (Mironov, CCS 2012). Floats are refused, to make a silently inexact
parameter (``0.1`` is not 1/10) a loud error.

Running time: each sampler runs an expected O(1) number of loop iterations
whatever the scale (CKS 2020, Sec. 5), each on integers of a few hundred bits at
most, so scales of 2**40 .. 2**60 grid units cost tens of microseconds. The
running time depends on the noise drawn, never on the value the noise protects.

Test: tests/noise/test_samplers.py, tests/stats/test_noise_distribution.py.
"""
from __future__ import annotations

from fractions import Fraction
from math import isqrt
from numbers import Rational

from dpsql.noise.rng import Rng

__all__ = ["bernoulli_exp", "discrete_gaussian", "discrete_laplace"]


def _as_ratio(x: int | Fraction, name: str) -> tuple[int, int]:
    """``x`` as (numerator, denominator > 0), exactly; refuses floats."""
    if isinstance(x, bool) or not isinstance(x, Rational):
        raise TypeError(f"{name} must be an int or fractions.Fraction, not {type(x).__name__}")
    return int(x.numerator), int(x.denominator)


# --- Algorithm 1: Bernoulli(exp(-gamma)) -------------------------------------------------

def _bernoulli_exp_le1(num: int, den: int, rng: Rng) -> bool:
    """True with probability exp(-num/den), for 0 <= num <= den.

    CKS 2020 Alg. 1, gamma in [0, 1]: draw A_k ~ Bernoulli(gamma/k) for
    k = 1, 2, ... until the first A_k = 0; return True iff that k is odd.
    P(first zero at k) = gamma^(k-1)/(k-1)! - gamma^k/k!, so
    P(k odd) = sum_j (-gamma)^j/j! = exp(-gamma). Bernoulli(num/(den*k)) is
    exact: ``randbelow(den*k) < num``.
    """
    k = 1
    while rng.randbelow(den * k) < num:
        k += 1
    return k % 2 == 1


def _bernoulli_exp(num: int, den: int, rng: Rng) -> bool:
    """True with probability exp(-num/den), for num >= 0, den >= 1.

    CKS 2020 Alg. 1, gamma > 1: exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)),
    a product of independent coins; stop at the first failure (expected < 1.6 coins).
    """
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_le1(1, 1, rng):
            return False
    return _bernoulli_exp_le1(rest, den, rng)


def bernoulli_exp(gamma: int | Fraction, rng: Rng) -> bool:
    """Return True with probability exactly exp(-gamma), for rational gamma >= 0.

    Claim: P(True) = exp(-gamma) exactly, given a uniform ``rng``.
    Assumes: ``rng.randbelow`` is uniform.
    Source: Canonne, Kamath & Steinke 2020, Algorithm 1.
    Test: tests/noise/test_samplers.py (gamma = 0 and frequencies).
    """
    num, den = _as_ratio(gamma, "gamma")
    if num < 0:
        raise ValueError("gamma must be >= 0")
    return _bernoulli_exp(num, den, rng)


# --- Algorithm 2: discrete Laplace -------------------------------------------------------

def _discrete_laplace(t: int, s: int, rng: Rng) -> int:
    """A draw with P(x) proportional to exp(-|x| * s / t), integers t, s >= 1.

    CKS 2020 Alg. 2. U uniform on [0, t) kept with probability exp(-U/t), and
    V ~ Geometric(1 - exp(-1)) counted with Bernoulli(exp(-1)) coins, make
    X = U + t*V geometric with P(X = x) proportional to exp(-x/t). Then
    Y = floor(X / s) is geometric with P(Y = y) proportional to exp(-y*s/t).
    A fair sign B gives the two-sided law, rejecting (B = 1, Y = 0) so zero is
    not counted twice. Expected iterations are O(1) for any t, s with t/s >= 1.
    """
    while True:
        u = rng.randbelow(t)
        if not _bernoulli_exp_le1(u, t, rng):
            continue
        v = 0
        while _bernoulli_exp_le1(1, 1, rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.randbits(1) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace(scale: int | Fraction, rng: Rng) -> int:
    """An integer with P(x) proportional to exp(-|x|/scale), rational scale > 0.

    Claim: exact discrete Laplace law; adding it to an integer query with
    sensitivity D gives (D/scale)-DP (CKS 2020, Sec. 2; the ratio of
    probabilities at x and x+D is at most exp(D/scale)).
    Assumes: ``rng`` uniform (a CSPRNG for releases).
    Source: Canonne, Kamath & Steinke 2020, Algorithm 2 with scale = t/s.
    Test: tests/stats/test_noise_distribution.py (chi-square against the pmf).
    """
    t, s = _as_ratio(scale, "scale")
    if t <= 0:
        raise ValueError("scale must be > 0")
    return _discrete_laplace(t, s, rng)


# --- Algorithm 3: discrete Gaussian ------------------------------------------------------

def _discrete_gaussian(p: int, q: int, rng: Rng) -> int:
    """A draw with P(x) proportional to exp(-x^2 / (2 sigma2)), sigma2 = p/q > 0.

    CKS 2020 Alg. 3: propose Y from the discrete Laplace with integer scale
    t = floor(sigma) + 1 and accept with probability
    exp(-(|Y| - sigma2/t)^2 / (2 sigma2)). With sigma2 = p/q that exponent is the
    exact ratio (|Y| q t - p)^2 / (2 p q t^2). Expected iterations are O(1).
    """
    t = isqrt(p // q) + 1          # floor(sqrt(p/q)) == isqrt(floor(p/q))
    den = 2 * p * q * t * t
    while True:
        y = _discrete_laplace(t, 1, rng)
        if _bernoulli_exp((abs(y) * q * t - p) ** 2, den, rng):
            return y


def discrete_gaussian(sigma2: int | Fraction, rng: Rng) -> int:
    """An integer with P(x) proportional to exp(-x^2/(2*sigma2)), rational sigma2 > 0.

    Claim: exact discrete Gaussian law N_Z(0, sigma2); adding it to an integer
    query with L2 sensitivity D gives D^2/(2 sigma2)-zCDP and an (eps, delta)
    guarantee essentially equal to the continuous Gaussian's (CKS 2020, Thm 4, Thm 7).
    Assumes: ``rng`` uniform (a CSPRNG for releases).
    Source: Canonne, Kamath & Steinke 2020, Algorithm 3.
    Test: tests/stats/test_noise_distribution.py (chi-square against the pmf).
    """
    p, q = _as_ratio(sigma2, "sigma2")
    if p <= 0:
        raise ValueError("sigma2 must be > 0")
    return _discrete_gaussian(p, q, rng)
