"""dpsql.ledger.accounting: each conversion against published values, an independent 60-digit computation
(mpmath) and Google's dp-accounting (when installed); the rigour of the directed rounding; the zCDP
cost of each mechanism checked against its Renyi divergences computed from the definition."""
from __future__ import annotations

import json
import math
import random
from decimal import Decimal
from fractions import Fraction

import mpmath as mp
import pytest

from dpsql.ledger import accounting as A
from dpsql.noise import make_mechanism
from dpsql.noise.mechanisms import epsilon_for_rho, rho_bound

mp.mp.dps = 60


def exact_epsilon(rho, delta) -> mp.mpf:
    """CKS20 Cor. 13: inf over alpha > 1 of alpha rho + (ln(1/delta) - ln alpha)/(alpha - 1) + ln(1 - 1/alpha),
    at 60 digits: the minimiser is the root of rho (alpha - 1)^2 = ln(1/delta) - ln(alpha). Floats are
    read as dpsql reads them, as the decimal of their shortest repr (1e-6 is 10^-6)."""
    rho, delta = (mp.mpf(repr(x)) if isinstance(x, float) else mp.mpf(x) for x in (rho, delta))
    big_l = mp.log(1 / delta)
    g = lambda s: s * s * rho - big_l + mp.log(1 + s)
    s = mp.findroot(g, (mp.mpf("1e-30"), mp.sqrt(big_l / rho) + 1), solver="anderson")
    a = 1 + s
    return a * rho + (big_l - mp.log(a)) / (a - 1) + mp.log(1 - 1 / a)


CASES = [(0.5, 1e-6), (1.5, 1e-6), (0.005, 1e-8), (1e-5, 1e-6), (10.0, 1e-9), (0.0174, 1e-6), (100.0, 1e-3),
         (2.5e-7, 1e-10), (0.3, 0.05)]


# -- the conversion -----------------------------------------------------------------------------------

@pytest.mark.parametrize("rho, delta", CASES)
def test_conversion_is_an_upper_bound_within_1e_12_of_the_exact_infimum(rho, delta):
    ours = A.epsilon_upper(rho, delta)
    exact = exact_epsilon(rho, delta)
    assert mp.mpf(str(ours)) >= exact                                  # never in the analyst's favour
    assert mp.mpf(str(ours)) - exact <= 1e-12 * max(1, exact)          # and tight


def test_conversion_on_random_inputs_is_always_conservative():
    rng = random.Random(14)
    for _ in range(200):
        rho = 10 ** rng.uniform(-7, 2)
        delta = 10 ** rng.uniform(-12, -1)
        ours = mp.mpf(str(A.epsilon_upper(rho, delta)))
        exact = max(exact_epsilon(rho, delta), 0)       # a negative infimum means epsilon 0
        assert exact <= ours <= exact + 1e-12 * max(1, exact), (rho, delta)


@pytest.mark.parametrize("rho, delta", CASES)
def test_conversion_beats_the_bun_steinke_bound(rho, delta):
    """BS16 Prop. 1.3: rho-zCDP is (rho + 2 sqrt(rho ln(1/delta)), delta)-DP; CKS20 is tighter."""
    assert float(A.epsilon_upper(rho, delta)) < rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_conversion_matches_google_dp_accounting():
    """dp-accounting (test-only dependency) implements CKS20 Prop. 12 over a grid of orders: with a
    dense grid it can only be slightly above the infimum, and never below ours by more than rounding."""
    rdp = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    orders = sorted({1 + 10 ** (i / 400) for i in range(-1600, 1600)} | {1 + i / 1000 for i in range(11, 5000)})
    for rho, delta in CASES:
        theirs, _ = rdp.compute_epsilon(orders, [rho * a for a in orders], delta)
        ours = float(A.epsilon_upper(rho, delta))
        assert ours <= theirs * (1 + 1e-12)
        assert theirs - ours <= 1e-4 * max(1, ours), (rho, delta, ours, theirs)


def test_the_issue_numbers_at_epsilon_10_delta_1e_6():
    """The budget of the issue: 100 Gaussian queries of sensitivity 1 at sigma 45.9 under basic
    composition; about 6,500 at that sigma under zCDP, or 100 at sigma 5.7; Laplace gains about 3x."""
    sigma = make_mechanism("gaussian", 1.0, 0.1, 1e-8).sigma
    assert sigma == pytest.approx(45.9, abs=0.05)
    n = A.zcdp_count(0, 0, A.decimal_up(Fraction(1) / (2 * Fraction(sigma) ** 2)), 0, 10, 1e-6)
    assert 6400 <= n <= 6600
    cap = float(A.rho_capacity(10, 1e-6))
    assert 1 / math.sqrt(2 * cap / 100) == pytest.approx(5.7, abs=0.01)
    assert A.zcdp_count(0, 0, A.laplace_rho(0.1), 0, 10, 1e-6) == 307                 # 3.07x basic's 100
    assert A.basic_count(0, 0, 0.1, 0, 10, 1e-6) == 100
    assert A.zcdp_count(0, 0, A.laplace_rho(0.1), 0, 1, 1e-6) == 4    # and at (1, 1e-6) zCDP loses: 4 < 10


def test_rho_capacity_is_rigorous_and_tight():
    for eps, delta in [(10, 1e-6), (1, 1e-6), (0.1, 1e-9), (50, 1e-3)]:
        cap = A.rho_capacity(eps, delta)
        assert A.fits(cap, 0, eps, delta)
        assert not A.fits(cap * Decimal("1.000000001"), 0, eps, delta)
        assert exact_epsilon(str(cap), delta) <= eps



def test_fits_by_capacity_is_sound_and_agrees_with_the_conversion():
    """fits() answers rho <= rho_capacity without a logarithm: every such rho must convert to
    within the budget by the exact infimum (60 digits), and above the capacity fits() must still
    follow epsilon_upper (what it answered before the fast path)."""
    rng = random.Random(17)
    for _ in range(60):
        eps, delta = 10 ** rng.uniform(-2, 2), 10 ** rng.uniform(-12, -2)
        cap = A.rho_capacity(eps, delta)
        for rho in (cap * Decimal(rng.uniform(0, 1)), cap):
            rho = A.decimal_up(Fraction(rho))
            if rho <= cap:
                assert A.fits(rho, 0, eps, delta)
                assert exact_epsilon(str(rho), delta) <= eps, (rho, eps, delta)
        above = cap * Decimal(1 + rng.uniform(1e-9, 0.5))
        assert A.fits(above, 0, eps, delta) == (A.epsilon_upper(above, delta) <= A._as_decimal(eps))


def test_epsilon_shown_is_an_upper_bound_within_1e_6_of_the_conversion():
    """epsilon_spent (what people are shown after each charge) is evaluated at a grid alpha:
    never below the tight epsilon, and within a relative 1e-6 of epsilon_upper."""
    rng = random.Random(23)
    cases = CASES + [(10 ** rng.uniform(-7, 2), 10 ** rng.uniform(-12, -1)) for _ in range(150)]
    worst = 0.0
    for rho, delta in cases:
        shown = A.epsilon_spent(rho, 0, delta)
        tight = float(A.epsilon_upper(rho, delta))
        exact = max(exact_epsilon(rho, delta), 0)
        assert mp.mpf(repr(shown)) >= exact * (1 - 1e-15), (rho, delta)    # (float rounding of the Decimal)
        assert shown <= tight * (1 + 1e-6) + 1e-300, (rho, delta, shown, tight)
        worst = max(worst, shown / tight - 1 if tight else 0.0)
    assert worst > 0        # the grid is in use: some cases are looser than the optimised alpha


def test_fits_edges():
    assert A.fits(0, 0, 1, 1e-6) and A.fits(0, Decimal("1E-6"), 1, Decimal("1E-6"))
    assert not A.fits(0, Decimal("1.0000001E-6"), 1, Decimal("1E-6"))      # the delta part alone
    assert not A.fits(Decimal("1E-30"), Decimal("1E-6"), 1, Decimal("1E-6"))  # nothing left to convert at
    assert not A.fits(1, 0, 1, 0)                                         # zCDP never gives delta = 0
    assert A.fits(10 ** 6, 0, float("inf"), 1e-6)
    assert A.epsilon_upper(1, 0).is_infinite() and A.epsilon_upper(0, 1e-9) == 0


def test_the_delta_part_uses_up_the_conversion_s_delta():
    """(rho, delta_0) converts at delta_B - delta_0 (claim 5): more delta part, larger epsilon."""
    free = A.epsilon_upper(0.1, Decimal("1E-6"))
    used = A.epsilon_upper(0.1, Decimal("1E-6") - Decimal("9E-7"))
    assert used > free
    assert A.fits(0.1, Decimal("9E-7"), used, Decimal("1E-6"))
    assert not A.fits(0.1, Decimal("9E-7"), free, Decimal("1E-6"))


def test_decimal_up_never_rounds_down():
    rng = random.Random(3)
    for _ in range(500):
        x = Fraction(rng.randrange(1, 10 ** 40), rng.randrange(1, 10 ** 40))
        d = A.decimal_up(x)
        assert Fraction(d) >= x and Fraction(d) - x <= x * Fraction(1, 10 ** 29)
    assert A.decimal_up(Fraction(1, 8)) == Decimal("0.125")


# -- counting and planning ----------------------------------------------------------------------------

def test_zcdp_count_is_the_last_charge_that_fits():
    for rho, part, spent in [(0.005, 0, 0), (0.0123, Decimal("1E-8"), 0.3), (0.2, 0, 1.2), (1e-4, 0, 0)]:
        n = A.zcdp_count(spent, 0, rho, part, 10, 1e-6)
        r, p = Decimal(str(rho)), Decimal(part)
        assert A.fits(Decimal(str(spent)) + n * r, n * p, 10, 1e-6)
        assert not A.fits(Decimal(str(spent)) + (n + 1) * r, (n + 1) * p, 10, 1e-6)
    assert A.zcdp_count(0, 0, 1e-9, 0, float("inf"), 1e-6) is None
    assert A.zcdp_count(5, 0, 0.1, 0, 1, 1e-6) == 0


def test_advanced_composition_formula_and_comparisons():
    """DRV10 / Dwork & Roth Thm 3.20, checked on one value by hand, then as a comparison."""
    k, eps, dp = 100, 0.1, 1e-6
    assert A.advanced_epsilon(k, eps, dp) == pytest.approx(math.sqrt(200 * math.log(1e6)) * 0.1
                                                            + 100 * 0.1 * (math.exp(0.1) - 1))
    assert A.advanced_epsilon(k, eps, dp) < k * eps                 # many small steps: better than basic
    assert A.advanced_epsilon(4, 0.5, dp) > 4 * 0.5                 # few large ones: worse
    assert A.advanced_count(0.01, 0, 10, 1e-6) > A.basic_count(0, 0, 0.01, 0, 10, 1e-6)
    n = A.advanced_count(0.01, 0, 10, 1e-6)
    assert A.advanced_epsilon(n, 0.01, 1e-6) <= 10 < A.advanced_epsilon(n + 1, 0.01, 1e-6)


def test_plan_series_under_the_three_rules():
    plans = {p.rule: p for p in A.plan_series(1000, 0.01, 0.0, A.laplace_rho(0.01), 0, 10, 1e-6)}
    assert plans["basic"].epsilon == pytest.approx(10.0) and plans["basic"].fits and plans["basic"].most == 1000
    assert plans["advanced"].epsilon < 10 and plans["advanced"].most > 1000
    assert plans["zcdp"].epsilon < plans["advanced"].epsilon and plans["zcdp"].most > plans["advanced"].most
    # a Gaussian query's own delta counts against advanced composition, not against zCDP
    g = make_mechanism("gaussian", 1.0, 0.1, 1e-8)
    plans = {p.rule: p for p in A.plan_series(100, 0.1, 1e-8, A.decimal_up(g.rho), 0, 10, 1e-6)}
    assert plans["advanced"].epsilon == math.inf and not plans["advanced"].fits
    assert plans["zcdp"].fits and plans["zcdp"].most > 6000


# -- each mechanism's rho against the Renyi divergences of its noise ------------------------------------

def _renyi_discrete(p, q, alpha) -> mp.mpf:
    """D_alpha(P || Q) = ln(sum p^alpha q^(1 - alpha)) / (alpha - 1) over the integers (p, q: pmfs)."""
    total = mp.nsum(lambda z: p(z) ** alpha * q(z) ** (1 - alpha), [-mp.inf, mp.inf])
    return mp.log(total) / (alpha - 1)


@pytest.mark.parametrize("sigma, shift", [(1.5, 1), (2.0, 3), (0.8, 1)])
def test_discrete_gaussian_rho_claim(sigma, shift):
    """CKS20 Thm 4: N_Z(0, s^2) shifted by an integer D is (D^2 / 2s^2)-zCDP; checked from the definition."""
    s2 = mp.mpf(sigma) ** 2
    norm = mp.nsum(lambda z: mp.exp(-z * z / (2 * s2)), [-mp.inf, mp.inf])
    p = lambda z: mp.exp(-z * z / (2 * s2)) / norm
    q = lambda z: mp.exp(-(z - shift) ** 2 / (2 * s2)) / norm
    rho = Fraction(shift * shift) / (2 * Fraction(sigma) ** 2)
    for alpha in (1.01, 1.5, 2, 4, 10, 40):
        assert _renyi_discrete(p, q, alpha) <= alpha * mp.mpf(rho.numerator) / rho.denominator + 1e-40


@pytest.mark.parametrize("eps, shift", [(0.1, 1), (0.5, 2), (1.0, 1), (2.0, 3)])
def test_laplace_rho_claim(eps, shift):
    """BS16 Prop. 1.4 for the discrete Laplace: scale shift/eps (so eps-DP), D_alpha <= alpha eps^2 / 2."""
    t = mp.mpf(shift) / eps
    c = mp.tanh(1 / (2 * t))                                           # normalising constant: (1-q)/(1+q)
    p = lambda z: c * mp.exp(-abs(z) / t)
    q = lambda z: c * mp.exp(-abs(z - shift) / t)
    for alpha in (1.01, 1.5, 2, 4, 10, 40):
        assert _renyi_discrete(p, q, alpha) <= alpha * mp.mpf(eps) ** 2 / 2


def test_mechanisms_report_their_exact_rho():
    lap = make_mechanism("laplace", 3.0, 0.25)
    assert lap.rho == Fraction(0.25) ** 2 / 2
    for kind in ("gaussian", "gaussian_classic"):
        g = make_mechanism(kind, 7.5, 0.5, 1e-7)
        assert g.rho == Fraction(g.grid_sensitivity ** 2, 2 * g._grid_sigma ** 2)
        # in value units the same as (sensitivity / sigma)^2 / 2, the grid's allowance included
        assert float(g.rho) == pytest.approx((7.5 / g.sigma) ** 2 / 2, rel=1e-6)
        assert float(g.rho) <= rho_bound(kind, 0.5, 1e-7) * (1 + 1e-12)


@pytest.mark.parametrize("eps, delta", [(0.1, 1e-8), (0.5, 1e-8), (1.0, 1e-6), (3.0, 1e-9)])
def test_a_gaussian_s_rho_converts_back_to_at_least_its_calibration(eps, delta):
    """zCDP's conversion is never tighter than the exact Gaussian curve (Balle-Wang): the rho charged
    for an analytic Gaussian at (eps, delta) converts, at that delta, to an epsilon >= eps."""
    g = make_mechanism("gaussian", 1.0, eps, delta)
    assert float(A.epsilon_upper(A.decimal_up(g.rho), delta)) >= eps


def test_epsilon_for_rho_solves_the_plan_s_parts():
    parts = (("gaussian", 1 / 3, 5e-9), ("gaussian", 1 / 3, 5e-9), ("laplace", 1 / 3, 0.0))
    eps = epsilon_for_rho(parts, 0.01)
    total = sum(float(make_mechanism(k, 1.0, eps * s, d).rho) for k, s, d in parts)
    assert 0.01 * (1 - 1e-6) <= total <= 0.01
    assert epsilon_for_rho((("laplace", 1.0, 0.0),), 0.005) == pytest.approx(0.1, rel=1e-6)


# -- rho recomputed from stored parameters (the v2 -> v3 migration) -----------------------------------------

def _params(values, selection=None, surcharge=None):
    out = {"values": [dict(m.params(), measure=f"m{i}") for i, m in enumerate(values)]}
    if selection is not None:
        out["partition_selection"] = dict(selection.params(), threshold=12.3, delta=5e-9, l0=2)
    if surcharge is not None:
        out["subset_selection"] = {"population": "p", "surcharge": surcharge}
    return json.loads(json.dumps(out))


def test_rho_of_params_recomputes_what_the_mechanisms_charge():
    g1, g2 = make_mechanism("gaussian", 2.0, 0.25, 5e-9), make_mechanism("gaussian", 500000.0, 0.25, 5e-9)
    sel = make_mechanism("laplace", 2.0, 0.25)
    rho, part = A.rho_of_params(_params([g1, g2], sel, 1.0), Decimal("1.0"), Decimal("1E-8"))
    assert rho == (g1.rho + g2.rho + sel.rho) * 2 and part == Decimal("5E-9")
    # v2 rows stored no grid_sigma: from the float sigma, bounded above, within 1e-15
    old = _params([g1])
    del old["values"][0]["grid_sigma"]
    rho, part = A.rho_of_params(old, Decimal("0.25"), Decimal("5E-9"))
    assert g1.rho <= rho <= g1.rho * (1 + Fraction(1, 10 ** 15)) and part == 0
    lap = make_mechanism("laplace", 1.0, 0.5)
    assert A.rho_of_params(_params([lap]), Decimal("0.5"), Decimal(0)) == (Fraction(1, 8), 0)


@pytest.mark.parametrize("params", [{}, {"scale": 2.0}, None, {"values": []}, {"values": [{"mechanism": "x"}]},
                                    {"values": [{"mechanism": "gaussian", "grid_sensitivity": True}]}])
def test_rho_of_unreadable_params_is_the_generic_bound(params):
    assert A.rho_of_params(params, Decimal("0.5"), Decimal("1E-7")) == (Fraction(1, 8), Decimal("1E-7"))
