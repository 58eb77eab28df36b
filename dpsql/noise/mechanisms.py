"""Noise mechanisms: Laplace, classic Gaussian and analytic Gaussian, released on a grid.

The grid (why no float noise ever touches a float)
---------------------------------------------------
Adding floating-point noise to a float leaks the true value through the set of
doubles the sum can take (Mironov, "On significance of the least significant bits
for differential privacy", CCS 2012). Every mechanism here therefore releases on
a grid of width ``2**k``, the remedy OpenDP also uses:

1. the true value ``x`` (int, float, Decimal or Fraction) is converted *exactly*
   to a rational and rounded to the nearest grid point: ``x_g = round(x / 2**k)``,
   an integer (ties to even; any fixed rule would do);
2. an integer ``z`` is drawn from an exact discrete sampler
   (:mod:`dpsql.noise.samplers`, Canonne, Kamath & Steinke 2020) fed by the
   OS CSPRNG;
3. the release is ``float((x_g + z) * 2**k)``: a fixed function of the integer
   ``x_g + z``, hence post-processing. Every possible output is a multiple of
   ``2**k`` whatever ``x`` is, so the low bits say nothing about ``x``.

Sensitivity on the grid. Rounding moves each value by at most half a grid unit,
so if one privacy unit moves a released value from ``x`` to ``x'`` then
``|x_g - x'_g| <= |x - x'| / 2**k + 1``. A query releases several values with
one mechanism (one per group and aggregate; ``sensitivity`` bounds the L1 or L2
norm of the whole change), and each of the ``m`` values that changes gains less
than one grid unit: the grid-unit sensitivity is at most ``Δ/2**k + m`` (L1) or
``Δ/2**k + sqrt(m)`` (L2). The integer noise is calibrated for

    Δ_g = ceil(Δ / 2**k) + ROUNDING_ALLOWANCE,     ROUNDING_ALLOWANCE = 2**16,

which covers up to 2**16 changed values under L1 (2**32 under L2). The exponent
``k = floor(log2(min(Δ, nominal noise scale))) - 40`` depends only on the public
parameters, and makes ``Δ/2**k >= 2**40``, so the allowance costs a factor of at
most ``1 + 2**-24`` in noise. ``scale`` and ``sigma`` report the noise actually
added, in value units, allowance included.

Nothing here depends on the data except the released value itself; errors name
parameters, never data values.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from numbers import Rational, Real
from statistics import NormalDist

from dpsql.errors import InternalError, InvalidSetting
from dpsql.noise.rng import Rng, SecureRng
from dpsql.noise.samplers import discrete_gaussian, discrete_laplace

__all__ = [
    "DISCRETE_DELTA_MARGIN",
    "GRID_BITS",
    "ROUNDING_ALLOWANCE",
    "AnalyticGaussian",
    "Gaussian",
    "Laplace",
    "analytic_gaussian_sigma",
    "gaussian_delta",
    "make_mechanism",
]

GRID_BITS = 40                  # the grid is 2**-40 of min(sensitivity, noise scale) or finer
ROUNDING_ALLOWANCE = 2 ** 16    # grid units added to the sensitivity for rounding (see module doc)
DISCRETE_DELTA_MARGIN = 1e-6    # analytic Gaussian is calibrated for delta * (1 - this)


# --- parameter checks --------------------------------------------------------------------

def _positive(mechanism: str, name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, Real):
        raise InvalidSetting(f"{mechanism}: {name} must be a number")
    value = float(x)
    if not math.isfinite(value) or value <= 0:
        raise InvalidSetting(f"{mechanism}: {name} must be finite and > 0")
    return value


def _probability(mechanism: str, name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, Real):
        raise InvalidSetting(f"{mechanism}: {name} must be a number")
    value = float(x)
    if not 0 < value < 1:
        raise InvalidSetting(f"{mechanism}: {name} must be in (0, 1)")
    return value


def _alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0 < float(alpha) < 1:
        raise InvalidSetting("alpha must be in (0, 1)")
    return float(alpha)


# --- the grid ----------------------------------------------------------------------------

def _floor_log2(r: Fraction) -> int:
    """floor(log2(r)) for a rational r > 0, exactly."""
    n, d = r.numerator, r.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1
    return e


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _grid(sensitivity: float, scale_per_sensitivity: float) -> tuple[int, int]:
    """(k, Δ_g): grid exponent and grid-unit sensitivity, see the module docstring."""
    sens = Fraction(sensitivity)
    k = _floor_log2(sens * min(Fraction(1), Fraction(scale_per_sensitivity))) - GRID_BITS
    grid_sensitivity = math.ceil(sens / _pow2(k)) + ROUNDING_ALLOWANCE
    return k, grid_sensitivity


def _check_range(mechanism: str, scale: Fraction) -> None:
    """The noise scale in value units must be a normal, finite float (it is reported)."""
    if not sys.float_info.min <= scale <= sys.float_info.max:
        raise InvalidSetting(f"{mechanism}: sensitivity and epsilon give a noise scale "
                             "outside the float range")


def _exact(value: object) -> Fraction:
    """The true value as an exact rational. Errors name the type, never the value."""
    try:
        if isinstance(value, (Rational, float, Decimal)):
            return Fraction(value)
        if isinstance(value, Real):               # e.g. numpy.float32: widening is exact
            return Fraction(float(value))
    except (ValueError, OverflowError):
        raise InternalError("the true value to release is not a finite number") from None
    raise InternalError(f"cannot release a value of type {type(value).__name__}")


def _snap(value: object, k: int) -> int:
    """round(value / 2**k) to the nearest integer (ties to even), exactly."""
    x = _exact(value)
    return round(x * (1 << -k)) if k < 0 else round(x / (1 << k))


def _unsnap(n: int, k: int) -> float:
    """float(n * 2**k), correctly rounded (int true division is exact-then-round)."""
    try:
        return float(n << k) if k >= 0 else n / (1 << -k)
    except OverflowError:
        raise InternalError("the noisy value is outside the float range") from None


# --- Gaussian calibration ----------------------------------------------------------------

_SQRT2 = math.sqrt(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _log_ndtr(x: float) -> float:
    """log Φ(x), accurate in both tails (erfc to x = -30, asymptotic series below)."""
    if x >= 0:
        return math.log1p(-0.5 * math.erfc(x / _SQRT2))
    if x > -30:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    t2 = x * x            # Mills-ratio series; next term 10395/t^12 < 2e-14 at |x| >= 30
    series = 1 - 1 / t2 + 3 / t2**2 - 15 / t2**3 + 105 / t2**4 - 945 / t2**5
    return -0.5 * t2 - math.log(-x) - _HALF_LOG_2PI + math.log(series)


def _bw_delta(ratio: float, epsilon: float) -> float:
    """Balle-Wang delta of the Gaussian mechanism with sigma = ratio * sensitivity.

    Φ(1/(2r) - εr) - e^ε Φ(-1/(2r) - εr), evaluated as T1 * (1 - exp(log T2 - log T1))
    in log space so that e^ε never overflows and tiny tails do not underflow.
    """
    a = 0.5 / ratio - epsilon * ratio
    b = -0.5 / ratio - epsilon * ratio
    log_t1 = _log_ndtr(a)
    log_t2 = epsilon + _log_ndtr(b)
    if log_t2 >= log_t1:
        return 0.0
    return math.exp(log_t1) * -math.expm1(log_t2 - log_t1)


@lru_cache(maxsize=256)
def _analytic_ratio(epsilon: float, delta: float) -> float:
    try:
        return _bisect_ratio(epsilon, delta)
    except ArithmeticError:                      # e.g. epsilon ~ 1e300 overflows the tails
        raise InvalidSetting("gaussian: epsilon and delta are outside the supported range") from None


def _bisect_ratio(epsilon: float, delta: float) -> float:
    """Smallest sigma/Δ whose Balle-Wang delta is <= delta, by bisection.

    Bisects against delta * (1 - 1e-9): the float evaluation of the Balle-Wang
    delta is accurate to about 3e-10 relative over epsilon in [1e-3, 50] and
    delta in [1e-12, 0.1] (checked against mpmath in tests/noise), so the true
    delta of the returned ratio is <= delta.
    """
    goal = delta * (1 - 1e-9)
    hi = 1.0
    for _ in range(2100):
        if _bw_delta(hi, epsilon) <= goal:
            break
        hi *= 2.0
    else:
        raise InvalidSetting("gaussian: epsilon and delta are outside the supported range")
    lo = hi
    for _ in range(2100):
        if _bw_delta(lo, epsilon) > goal:
            break
        lo /= 2.0
    else:
        raise InvalidSetting("gaussian: epsilon and delta are outside the supported range")
    for _ in range(200):                            # invariant: δ(lo) > goal >= δ(hi)
        if hi - lo <= hi * 1e-13:
            break
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        if _bw_delta(mid, epsilon) <= goal:
            hi = mid
        else:
            lo = mid
    if not (_bw_delta(hi, epsilon) <= goal < _bw_delta(hi * (1 - 1e-6), epsilon)):
        raise InternalError("gaussian: sigma calibration did not converge")
    return hi


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """The exact delta at which N(0, sigma^2) noise is (epsilon, delta)-DP for L2 sensitivity Δ.

    Balle & Wang 2018, Thm 8: Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).
    """
    return _bw_delta(sigma / sensitivity, epsilon)


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest sigma (to relative 1e-9) with gaussian_delta(sigma, Δ, ε) <= delta.

    The continuous calibration, with no grid and no margin; checked on return
    that sigma satisfies the inequality and sigma * (1 - 1e-6) does not.
    Source: Balle & Wang, "Improving the Gaussian Mechanism for Differential
    Privacy", ICML 2018, Alg. 1 (here plain bisection on sigma/Δ).
    """
    sensitivity = _positive("gaussian", "sensitivity", sensitivity)
    epsilon = _positive("gaussian", "epsilon", epsilon)
    delta = _probability("gaussian", "delta", delta)
    return _analytic_ratio(epsilon, delta) * sensitivity


# --- mechanisms --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Laplace:
    """Discrete Laplace noise on a grid of width 2**k: the Laplace mechanism, made exact.

    Claim: if adding or removing one privacy unit moves the released values by
    at most ``sensitivity`` in L1 norm, releasing them is ``epsilon``-DP.
    Argument: on the grid the change is at most Δ_g units (module docstring);
    the integer noise has P(z) ∝ exp(-|z| ε / Δ_g), so shifting by d <= Δ_g
    grid units changes any output's probability by at most exp(ε d / Δ_g) <= e^ε;
    the float conversion is post-processing.
    Assumes: at most 2**16 released values change per privacy unit; SecureRng;
    the true values are computed exactly enough that ``sensitivity`` bounds them
    (Casacuberta et al. 2022 is the caller's concern).
    Source: Dwork & Roth 2014, Thm 3.6; exact sampler: Canonne, Kamath &
    Steinke 2020, Alg. 2; grid: Mironov 2012.
    Test: tests/noise/test_mechanisms.py, tests/stats/test_noise_distribution.py.
    """
    sensitivity: float
    epsilon: float
    _k: int = field(init=False, repr=False, compare=False)
    _grid_sensitivity: int = field(init=False, repr=False, compare=False)
    _grid_scale: Fraction = field(init=False, repr=False, compare=False)

    name = "laplace"

    def __post_init__(self) -> None:
        sensitivity = _positive(self.name, "sensitivity", self.sensitivity)
        epsilon = _positive(self.name, "epsilon", self.epsilon)
        k, grid_sensitivity = _grid(sensitivity, 1 / epsilon)
        object.__setattr__(self, "sensitivity", sensitivity)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "_k", k)
        object.__setattr__(self, "_grid_sensitivity", grid_sensitivity)
        object.__setattr__(self, "_grid_scale", Fraction(grid_sensitivity) / Fraction(epsilon))
        _check_range(self.name, self._grid_scale * _pow2(k))

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def k(self) -> int:
        """Grid exponent: every release is a multiple of 2**k."""
        return self._k

    @property
    def grid_sensitivity(self) -> int:
        """Δ_g = ceil(sensitivity / 2**k) + ROUNDING_ALLOWANCE, in grid units."""
        return self._grid_sensitivity

    @property
    def scale(self) -> float:
        """Noise scale b in value units: Δ_g * 2**k / ε (slightly above sensitivity/ε)."""
        return float(self._grid_scale * _pow2(self._k))

    def half_width(self, alpha: float = 0.05) -> float:
        """w with P(|noise| > w) = alpha: scale * ln(1/alpha)."""
        return self.scale * math.log(1 / _alpha(alpha))

    def release(self, value: object, rng: Rng | None = None) -> float:
        """value + noise, on the grid. ``rng`` defaults to a fresh SecureRng."""
        noise = discrete_laplace(self._grid_scale, rng if rng is not None else SecureRng())
        return _unsnap(_snap(value, self._k) + noise, self._k)

    @property
    def rho(self) -> Fraction:
        """Its zCDP cost, exactly: an epsilon-DP release is (epsilon^2 / 2)-zCDP (Bun & Steinke,
        TCC 2016, Prop. 1.4); the grid Laplace is epsilon-DP (class docstring)."""
        e = Fraction(self.epsilon)
        return e * e / 2

    def params(self) -> dict:
        return {
            "mechanism": self.name, "sensitivity": self.sensitivity, "epsilon": self.epsilon,
            "delta": 0.0, "scale": self.scale, "grid_exponent": self._k,
            "grid_sensitivity": self._grid_sensitivity,
        }


class _GaussianBase:
    """Shared behaviour of the two Gaussian mechanisms (slots dataclasses below)."""

    __slots__ = ()
    name: str
    sensitivity: float
    epsilon: float
    delta: float
    _k: int
    _grid_sensitivity: int
    _grid_sigma: int

    def _calibrate(self, ratio_for: object) -> None:
        sensitivity = _positive(self.name, "sensitivity", self.sensitivity)
        epsilon = _positive(self.name, "epsilon", self.epsilon)
        delta = _probability(self.name, "delta", self.delta)
        object.__setattr__(self, "sensitivity", sensitivity)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        ratio = ratio_for(epsilon, delta)                 # sigma / sensitivity
        k, grid_sensitivity = _grid(sensitivity, ratio)
        object.__setattr__(self, "_k", k)
        object.__setattr__(self, "_grid_sensitivity", grid_sensitivity)
        # Round sigma up to a whole number of grid units: more noise, never less.
        object.__setattr__(self, "_grid_sigma", math.ceil(Fraction(ratio) * grid_sensitivity))
        _check_range(self.name, self._grid_sigma * _pow2(k))

    @property
    def k(self) -> int:
        """Grid exponent: every release is a multiple of 2**k."""
        return self._k

    @property
    def grid_sensitivity(self) -> int:
        """Δ_g = ceil(sensitivity / 2**k) + ROUNDING_ALLOWANCE, in grid units."""
        return self._grid_sensitivity

    @property
    def sigma(self) -> float:
        """Standard deviation of the noise in value units (grid and rounding included)."""
        return float(self._grid_sigma * _pow2(self._k))

    @property
    def scale(self) -> float:
        return self.sigma

    def half_width(self, alpha: float = 0.05) -> float:
        """w with P(|noise| > w) = alpha: sigma * z_{1 - alpha/2}."""
        return self.sigma * NormalDist().inv_cdf(1 - _alpha(alpha) / 2)

    def release(self, value: object, rng: Rng | None = None) -> float:
        """value + noise, on the grid. ``rng`` defaults to a fresh SecureRng."""
        noise = discrete_gaussian(Fraction(self._grid_sigma ** 2),
                                  rng if rng is not None else SecureRng())
        return _unsnap(_snap(value, self._k) + noise, self._k)

    @property
    def rho(self) -> Fraction:
        """Its zCDP cost, exactly: Δ_g^2 / (2 σ_g^2) for discrete Gaussian noise of σ_g grid units on
        values that change by at most Δ_g grid units in L2 norm (Canonne, Kamath & Steinke 2020,
        Thm 4; Thm 14 for independent noise on several values). Unlike the (epsilon, delta) claim,
        this needs no margin for the grid: the zCDP of the discrete Gaussian is proven exactly."""
        return Fraction(self._grid_sensitivity ** 2, 2 * self._grid_sigma ** 2)

    def params(self) -> dict:
        return {
            "mechanism": self.name, "sensitivity": self.sensitivity, "epsilon": self.epsilon,
            "delta": self.delta, "scale": self.sigma, "sigma": self.sigma,
            "grid_exponent": self._k, "grid_sensitivity": self._grid_sensitivity,
            "grid_sigma": self._grid_sigma,
        }


def _classic_ratio(epsilon: float, delta: float) -> float:
    if epsilon >= 1:
        raise InvalidSetting(
            "gaussian_classic: epsilon must be < 1 (Dwork & Roth Thm A.1 holds only for "
            "epsilon < 1); use mechanism 'gaussian' (analytic) instead")
    ratio = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    # Fail closed unless the classic sigma also covers the discrete-grid margin
    # (it always has room to spare for epsilon < 1; tests/noise checks a grid).
    if ratio < _analytic_ratio(epsilon, delta * (1 - DISCRETE_DELTA_MARGIN)):
        raise InternalError("gaussian_classic: classic sigma below the analytic bound")
    return ratio


def _analytic_grid_ratio(epsilon: float, delta: float) -> float:
    return _analytic_ratio(epsilon, delta * (1 - DISCRETE_DELTA_MARGIN))


@dataclass(frozen=True, slots=True)
class Gaussian(_GaussianBase):
    """Discrete Gaussian noise on a grid, classic calibration.

    Claim: if adding or removing one privacy unit moves the released values by
    at most ``sensitivity`` in L2 norm, releasing them is (epsilon, delta)-DP,
    for epsilon < 1 only (InvalidSetting otherwise).
    Calibration: sigma = Δ2_grid * sqrt(2 ln(1.25/δ)) / ε with Δ2_grid = Δ_g * 2**k
    (module docstring), then rounded up to whole grid units.
    Assumes: the classic bound carries over to the discrete Gaussian; it has
    ample slack for that, and construction fails closed unless the classic sigma
    is at least the analytic sigma for delta * (1 - 1e-6), the discrete-grid
    calibration of AnalyticGaussian. At most 2**32 released values change per
    privacy unit; SecureRng.
    Source: Dwork & Roth 2014, Thm A.1; exact sampler: Canonne, Kamath &
    Steinke 2020, Alg. 3; grid: Mironov 2012.
    Test: tests/noise/test_mechanisms.py.
    """
    sensitivity: float
    epsilon: float
    delta: float
    _k: int = field(init=False, repr=False, compare=False)
    _grid_sensitivity: int = field(init=False, repr=False, compare=False)
    _grid_sigma: int = field(init=False, repr=False, compare=False)

    name = "gaussian_classic"

    def __post_init__(self) -> None:
        self._calibrate(_classic_ratio)


@dataclass(frozen=True, slots=True)
class AnalyticGaussian(_GaussianBase):
    """Discrete Gaussian noise on a grid, analytic calibration; any epsilon > 0.

    Claim: if adding or removing one privacy unit moves the released values by
    at most ``sensitivity`` in L2 norm, releasing them is (epsilon, delta)-DP.
    Calibration: the smallest sigma (bisection, relative 1e-12) with
    Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) <= δ (1 − 1e-6), for Δ = Δ_g * 2**k
    (module docstring), then rounded up to whole grid units.
    Why δ (1 − 1e-6): the noise is the discrete Gaussian on the grid, whose exact
    (ε, δ) curve (Canonne, Kamath & Steinke 2020, Thm 7) differs from the
    continuous one by a relative amount of order 1/σ_grid, and σ_grid >= 2**40
    grid units here; the 1e-6 margin covers that and the float error of the
    bisection (about 1e-10 relative).
    Assumes: at most 2**32 released values change per privacy unit; SecureRng;
    for several values released with independent noise, that the discrete
    curve stays within the same margin of the continuous one (not derived here;
    CKS 2020 analyse the multivariate discrete Gaussian separately).
    Source: Balle & Wang, ICML 2018, Thm 8; exact sampler: Canonne, Kamath &
    Steinke 2020, Alg. 3; grid: Mironov 2012.
    Test: tests/noise/test_mechanisms.py, tests/stats/test_noise_distribution.py.
    """
    sensitivity: float
    epsilon: float
    delta: float
    _k: int = field(init=False, repr=False, compare=False)
    _grid_sensitivity: int = field(init=False, repr=False, compare=False)
    _grid_sigma: int = field(init=False, repr=False, compare=False)

    name = "gaussian"

    def __post_init__(self) -> None:
        self._calibrate(_analytic_grid_ratio)


_KINDS = {"laplace", "gaussian", "gaussian_classic"}


def make_mechanism(kind: str, sensitivity: float, epsilon: float,
                   delta: float = 0.0) -> Laplace | Gaussian | AnalyticGaussian:
    """The mechanism named ``kind`` ('laplace', 'gaussian' = analytic, 'gaussian_classic').

    Laplace ignores ``delta``. Unknown kinds and bad parameters raise InvalidSetting.
    """
    if kind == "laplace":
        return Laplace(sensitivity, epsilon)
    if kind == "gaussian":
        return AnalyticGaussian(sensitivity, epsilon, delta)
    if kind == "gaussian_classic":
        return Gaussian(sensitivity, epsilon, delta)
    raise InvalidSetting(f"mechanism must be one of {', '.join(sorted(_KINDS))}")


# --- calibration to a zCDP cost ----------------------------------------------------------

def rho_bound(kind: str, epsilon: float, delta: float = 0.0) -> float:
    """An upper bound on the rho of ``make_mechanism(kind, Δ, epsilon, delta)`` for any Δ.

    Laplace: exactly epsilon^2 / 2. Gaussian: 1 / (2 r^2) for the sigma/Δ ratio r the calibration
    uses before the grid; the grid only rounds sigma up and the allowance is inside Δ_g, so
    Δ_g^2 / (2 σ_g^2) <= 1 / (2 r^2)."""
    epsilon = _positive(kind, "epsilon", epsilon)
    if kind == "laplace":
        return epsilon * epsilon / 2
    if kind == "exponential":       # a quantile: epsilon-bounded range, so epsilon^2/8 (dpsql.noise.exponential)
        return epsilon * epsilon / 8
    delta = _probability(kind, "delta", delta)
    if kind == "gaussian":
        ratio = _analytic_grid_ratio(epsilon, delta)
    elif kind == "gaussian_classic":
        ratio = _classic_ratio(epsilon, delta)
    else:
        raise InvalidSetting(f"mechanism must be one of {', '.join(sorted(_KINDS))}")
    return 0.5 / (ratio * ratio)


def epsilon_for_rho(parts: tuple[tuple[str, float, float], ...], rho: float) -> float:
    """The largest query epsilon (to relative 1e-6) at which the parts cost at most ``rho`` in total.

    Each part is (kind, share, delta): the part gets epsilon * share (an even split gives every
    part 1/parts) and, for Gaussians, the delta given. The total bound sum(rho_bound) increases
    with epsilon; a fixed-point step (rho grows about as epsilon^2) brackets the answer, bisection
    in log epsilon finishes it. Results are cached: a SET dpsql.rho costs this once per query shape."""
    return _epsilon_for_rho(tuple(parts), float(rho))


@lru_cache(maxsize=256)
def _epsilon_for_rho(parts: tuple[tuple[str, float, float], ...], rho: float) -> float:
    if not parts or not rho > 0 or not math.isfinite(rho):
        raise InvalidSetting("rho must be finite and > 0")

    def total(eps: float) -> float:
        return sum(rho_bound(kind, eps * share, delta) for kind, share, delta in parts)

    try:
        eps = math.sqrt(2 * rho / sum(share * share for _, share, _ in parts))   # exact for Laplace
        for _ in range(8):
            got = total(eps)
            if abs(got / rho - 1) < 1e-9:
                break
            eps *= math.sqrt(rho / got)
        lo, hi = eps, eps
        while total(lo) > rho:
            lo /= 1.5
        while total(hi) <= rho:
            hi *= 1.5
        for _ in range(60):                     # invariant: total(lo) <= rho < total(hi)
            if hi - lo <= lo * 1e-7:
                break
            mid = math.sqrt(lo * hi)
            if total(mid) <= rho:
                lo = mid
            else:
                hi = mid
    except (ArithmeticError, InvalidSetting):
        raise InvalidSetting("rho is outside the range this query's mechanisms support") from None
    return lo


def laplace_noised(sensitivity: float, epsilon: float, value, rng) -> float:
    """value + Laplace(sensitivity / epsilon) noise, by the exact sampler (for AboveThreshold:
    dpsql.analysis.auto_bounds.above_threshold)."""
    return make_mechanism("laplace", sensitivity, epsilon, 0.0).release(Fraction(value), rng)
