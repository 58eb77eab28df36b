"""Unit tests for dpsql.noise.mechanisms (fast; the distributions are in tests/stats)."""
from __future__ import annotations

import dataclasses
import json
import math
import pickle
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import InternalError, InvalidSetting
from dpsql.noise import (
    AnalyticGaussian,
    Gaussian,
    Laplace,
    SeededRng,
    analytic_gaussian_sigma,
    gaussian_delta,
    make_mechanism,
)
from dpsql.noise.mechanisms import DISCRETE_DELTA_MARGIN, GRID_BITS, _analytic_ratio

EPSILONS = [1e-3, 0.01, 0.1, 0.5, 0.9, 1.0, 2.0, 10.0, 50.0]
DELTAS = [1e-12, 1e-9, 1e-6, 1e-3, 0.05, 0.1]

MECHANISMS = [
    Laplace(1.0, 0.5),
    Laplace(250.0, 3.0),
    Laplace(1e-6, 1e-3),
    AnalyticGaussian(1.0, 0.5, 1e-6),
    AnalyticGaussian(1e4, 20.0, 1e-12),
    Gaussian(3.0, 0.2, 1e-9),
]
IDS = [repr(m) for m in MECHANISMS]


def on_grid(x: float, k: int) -> bool:
    return (Fraction(x) / Fraction(2) ** k).denominator == 1


# --- validation --------------------------------------------------------------------------

BAD_POSITIVE = [0, 0.0, -1.0, math.nan, math.inf, -math.inf, "1", None, True]


@pytest.mark.parametrize("bad", BAD_POSITIVE, ids=repr)
@pytest.mark.parametrize("param", ["sensitivity", "epsilon"])
@pytest.mark.parametrize("kind", ["laplace", "gaussian", "gaussian_classic"])
def test_bad_sensitivity_or_epsilon(kind, param, bad):
    args = {"sensitivity": 1.0, "epsilon": 0.5, "delta": 1e-6, param: bad}
    with pytest.raises(InvalidSetting, match=param) as info:
        make_mechanism(kind, **args)
    assert info.value.sqlstate == "22023"


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.1, 2.0, math.nan, math.inf, None], ids=repr)
@pytest.mark.parametrize("cls", [Gaussian, AnalyticGaussian])
def test_bad_delta(cls, bad):
    with pytest.raises(InvalidSetting, match="delta"):
        cls(1.0, 0.5, bad)


@pytest.mark.parametrize("epsilon", [1.0, 1.5, 50.0])
def test_classic_gaussian_needs_epsilon_below_one(epsilon):
    with pytest.raises(InvalidSetting, match="epsilon must be < 1"):
        Gaussian(1.0, epsilon, 1e-6)
    AnalyticGaussian(1.0, epsilon, 1e-6)        # the analytic one is fine


def test_make_mechanism_kinds():
    assert type(make_mechanism("laplace", 1, 1, 0.0)) is Laplace
    assert type(make_mechanism("laplace", 1, 1, 0.3)) is Laplace    # delta ignored
    assert type(make_mechanism("gaussian", 1, 1, 1e-6)) is AnalyticGaussian
    assert type(make_mechanism("gaussian_classic", 1, 0.5, 1e-6)) is Gaussian
    with pytest.raises(InvalidSetting, match="mechanism must be one of"):
        make_mechanism("geometric", 1, 1, 0.0)


def test_parameters_are_coerced_to_float():
    m = Laplace(2, 1)
    assert type(m.sensitivity) is float and type(m.epsilon) is float
    assert m.delta == 0.0
    assert Laplace(2, 1) == Laplace(2.0, 1.0) and hash(Laplace(2, 1)) == hash(Laplace(2.0, 1.0))


def test_scale_out_of_float_range_is_refused():
    with pytest.raises(InvalidSetting, match="float range"):
        Laplace(1e300, 1e-10)
    with pytest.raises(InvalidSetting):
        AnalyticGaussian(1.0, 1e300, 1e-6)


# --- calibration -------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [e for e in EPSILONS if e < 1])
@pytest.mark.parametrize("delta", DELTAS)
def test_analytic_sigma_below_classic(epsilon, delta):
    analytic = AnalyticGaussian(1.0, epsilon, delta).sigma
    classic = Gaussian(1.0, epsilon, delta).sigma
    assert analytic < classic
    assert classic == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) / epsilon, rel=1e-6)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
def test_analytic_mechanism_satisfies_balle_wang(epsilon, delta):
    m = AnalyticGaussian(2.5, epsilon, delta)
    assert gaussian_delta(m.sigma, m.sensitivity, epsilon) <= delta * (1 - DISCRETE_DELTA_MARGIN)
    # Nearly tight: only the grid (~2**-24) and the 1e-6 margin separate it from the optimum.
    assert m.sigma == pytest.approx(analytic_gaussian_sigma(2.5, epsilon, delta), rel=1e-5)


@pytest.mark.parametrize("epsilon", [1e-3, 2e-3, 0.01, 0.3, 0.99, 1.0, 3.0, 20.0, 50.0])
@pytest.mark.parametrize("delta", [1e-12, 3e-12, 1e-9, 1e-6, 1e-3, 0.1])
def test_analytic_sigma_is_smallest_exactly(epsilon, delta):
    """Against 60-digit arithmetic: sigma satisfies the inequality, sigma*(1-1e-6) does not."""
    import mpmath  # test extra: 60-digit reference arithmetic
    mpmath.mp.dps = 60

    def exact_delta(sigma: float) -> mpmath.mpf:
        s, e = mpmath.mpf(sigma), mpmath.mpf(epsilon)
        return mpmath.ncdf(1 / (2 * s) - e * s) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * s) - e * s)

    sigma = analytic_gaussian_sigma(1.0, epsilon, delta)
    assert exact_delta(sigma) <= delta
    assert exact_delta(sigma * (1 - 1e-6)) > delta
    assert float(exact_delta(sigma)) == pytest.approx(gaussian_delta(sigma, 1.0, epsilon), rel=1e-9)


def test_analytic_sigma_scales_with_sensitivity():
    assert analytic_gaussian_sigma(7.0, 0.3, 1e-8) == pytest.approx(7 * _analytic_ratio(0.3, 1e-8))


@pytest.mark.parametrize("epsilon", [1e-3, 0.1, 0.5, 0.99])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 0.1, 0.5, 0.99])
def test_classic_covers_discrete_margin(epsilon, delta):
    """The classic Gaussian's construction check never trips for epsilon < 1."""
    Gaussian(1.0, epsilon, delta)


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_grid_and_scale(m):
    assert m.grid_sensitivity >= 2**GRID_BITS
    assert m.grid_sensitivity * 2.0**m.k >= m.sensitivity
    if isinstance(m, Laplace):
        nominal = m.sensitivity / m.epsilon
        assert nominal <= m.scale <= nominal * (1 + 2**-23)
    else:
        assert m.scale == m.sigma
        assert on_grid(m.sigma, m.k)      # sigma is a whole number of grid units
    assert 2.0**m.k <= min(m.sensitivity, m.scale) * 2.0**-GRID_BITS * 2


def test_half_width_formulas():
    lap = Laplace(1.0, 0.5)
    assert lap.half_width() == pytest.approx(lap.scale * math.log(20))
    assert lap.half_width(0.01) == pytest.approx(lap.scale * math.log(100))
    for g in (AnalyticGaussian(1.0, 0.5, 1e-6), Gaussian(1.0, 0.5, 1e-6)):
        assert g.half_width() == pytest.approx(g.sigma * 1.959963984540054)
        assert g.half_width(0.01) == pytest.approx(g.sigma * 2.5758293035489)
    for bad in (0, 1, -0.5, 1.5):
        with pytest.raises(InvalidSetting, match="alpha"):
            lap.half_width(bad)


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_params_json(m):
    p = json.loads(json.dumps(m.params()))
    assert p["mechanism"] == m.name
    assert p["sensitivity"] == m.sensitivity and p["epsilon"] == m.epsilon
    assert p["delta"] == m.delta and p["scale"] == m.scale
    assert p["grid_exponent"] == m.k


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_frozen_and_picklable(m):
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.epsilon = 9.0
    clone = pickle.loads(pickle.dumps(m))
    assert clone == m and clone.scale == m.scale and clone.k == m.k


def test_names():
    assert (Laplace.name, Gaussian.name, AnalyticGaussian.name) == \
           ("laplace", "gaussian_classic", "gaussian")


# --- release -----------------------------------------------------------------------------

values = st.one_of(
    st.integers(min_value=-10**15, max_value=10**15),
    st.floats(min_value=-1e15, max_value=1e15, allow_nan=False),
    st.decimals(min_value=-10**12, max_value=10**12, allow_nan=False, allow_infinity=False, places=6),
    st.fractions(max_denominator=10**9).filter(lambda f: abs(f) < 10**12),
)


@settings(max_examples=150, deadline=None)
@given(value=values, which=st.integers(min_value=0, max_value=len(MECHANISMS) - 1),
       seed=st.integers(min_value=0, max_value=2**32))
def test_release_is_on_the_grid(value, which, seed):
    m = MECHANISMS[which]
    out = m.release(value, SeededRng(seed))
    assert type(out) is float and math.isfinite(out)
    assert on_grid(out, m.k)


@pytest.mark.parametrize("m", MECHANISMS, ids=IDS)
def test_release_of_float_tenth(m):
    out = m.release(0.1, SeededRng(11))
    assert isinstance(out, float)
    assert abs(out - 0.1) < 80 * m.scale


def test_release_defaults_to_secure_rng():
    assert isinstance(Laplace(1.0, 1.0).release(5), float)
    assert isinstance(AnalyticGaussian(1.0, 1.0, 1e-6).release(Decimal("5.5")), float)


def test_release_same_seed_same_output_for_all_exact_types():
    m = Laplace(1.0, 0.5)
    outs = {m.release(v, SeededRng(3)) for v in (3, 3.0, Decimal(3), Fraction(3))}
    assert len(outs) == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, Decimal("NaN"), Decimal("-Infinity")], ids=repr)
def test_release_non_finite_fails_closed_without_quoting(bad):
    with pytest.raises(InternalError) as info:
        Laplace(1.0, 0.5).release(bad, SeededRng(1))
    assert "nan" not in str(info.value).lower() and "inf" not in str(info.value).lower()


def test_release_rejects_non_numbers():
    with pytest.raises(InternalError, match="type str"):
        Laplace(1.0, 0.5).release("12.5", SeededRng(1))


def test_release_huge_and_tiny_values():
    m = Laplace(1.0, 0.5)
    assert m.release(10**30, SeededRng(1)) == pytest.approx(1e30)
    assert abs(m.release(5e-324, SeededRng(1))) < 80 * m.scale
