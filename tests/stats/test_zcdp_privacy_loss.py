"""Neighbouring datasets, many releases: k releases charged their rho stay within the (epsilon, delta)
that the ledger's conversion gives for the total (marker ``stats``).

D and D' differ in one privacy unit, which moves each released value by the mechanism's full
sensitivity (1). A trial releases the same value k times on D with the shipped mechanisms (the
grid, the exact discrete samplers, a seeded generator) and computes the exact privacy loss of the
whole transcript, L = log P_D(y) / P_D'(y), from the integer noise drawn:

  discrete Gaussian, shift d grid units, sigma_g:  (d^2 - 2 d z) / (2 sigma_g^2) per release
  discrete Laplace, shift d, scale t grid units:   (|z - d| - |z|) / t per release

(the normalising constants cancel: the shift is a whole number of grid units). For any epsilon,
delta(epsilon) = E_D[max(0, 1 - e^(epsilon - L))] is the smallest delta at which the pair (D, D') is
(epsilon, delta)-indistinguishable in that direction (CKS20 Lemma; OpenDP's cdp_delta proof), and
the same with D and D' swapped. The test takes the charged total rho (the ledger's: each
mechanism's exact rho, rounded up), converts it with accounting.epsilon_upper at delta_B, and
requires the empirical delta at that epsilon not to exceed delta_B significantly.

Significance: the summand lies in [0, 1]; by the empirical Bernstein bound (Maurer & Pontil 2009,
Thm 4), with probability at least 1 - eta the mean exceeds its expectation by at most
sqrt(2 V ln(2/eta) / N) + 7 ln(2/eta) / (3 (N - 1)). With eta = 2e-5 for each of the 4 checks
below (two sequences, two directions), a correct implementation fails this file with
probability at most 8e-5 < 1e-4. delta_B is large (0.05) so that the check has power at N = 12,000:
``test_the_check_detects_an_undercharge`` converts a quarter of the rho instead and must fail.
"""
from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dpsql.ledger import accounting
from dpsql.noise import SeededRng, make_mechanism
from dpsql.noise.mechanisms import _snap, gaussian_delta

pytestmark = pytest.mark.stats

N = 12_000
ETA = 2e-5
DELTA_B = Decimal("0.05")
SEQUENCES = {
    # k Gaussian releases of a count (sensitivity 1) at per-query (0.5, 1e-8)
    "gaussian": [("gaussian", 0.5, 1e-8)] * 10,
    # a heterogeneous series: Gaussian and Laplace queries (rho = epsilon^2 / 2 for the Laplace)
    "mixed": [("gaussian", 0.3, 1e-8)] * 6 + [("laplace", 0.2, 0.0)] * 4,
}


def _losses(sequence, seed: int, reverse: bool) -> np.ndarray:
    """N transcripts of the sequence on D (or D'), their exact privacy losses against the other."""
    rng = SeededRng(seed)
    mechs = [make_mechanism(kind, 1.0, eps, delta) for kind, eps, delta in sequence]
    out = np.empty(N)
    for i in range(N):
        total = 0.0
        for m in mechs:
            x, x2 = (1, 0) if reverse else (0, 1)               # the true value on this side and the other
            y = m.release(x, rng)
            yg = Fraction(y) / (Fraction(2) ** m.k)             # back to grid units: exact
            z = int(yg) - _snap(x, m.k)                          # the integer noise drawn
            d = _snap(x2, m.k) - _snap(x, m.k)                   # the shift, in grid units
            if m.name == "laplace":
                t = m._grid_scale
                total += float((abs(z - d) - abs(z)) / t)
            else:
                s2 = m._grid_sigma ** 2
                total += float(Fraction(d * d - 2 * d * z, 2 * s2))
        out[i] = total
    return out


def _delta_hat(losses: np.ndarray, epsilon: float) -> tuple[float, float]:
    """The empirical delta at epsilon and its one-sided (1 - ETA) upper deviation bound."""
    v = np.maximum(0.0, -np.expm1(epsilon - losses))
    mean, var = float(v.mean()), float(v.var(ddof=1))
    log_term = math.log(2 / ETA)
    return mean, math.sqrt(2 * var * log_term / N) + 7 * log_term / (3 * (N - 1))


def _charged(sequence) -> Decimal:
    """What the ledger would hold after the sequence: each exact rho rounded up, summed exactly."""
    return sum((accounting.decimal_up(make_mechanism(k, 1.0, e, d).rho) for k, e, d in sequence), Decimal(0))


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_k_releases_stay_within_the_converted_epsilon_delta(name):
    sequence = SEQUENCES[name]
    epsilon = float(accounting.epsilon_upper(_charged(sequence), DELTA_B))
    for seed, reverse in ((1, False), (2, True)):
        losses = _losses(sequence, seed + 10 * len(name), reverse)
        mean, slack = _delta_hat(losses, epsilon)
        assert mean <= float(DELTA_B) + slack, (name, reverse, epsilon, mean, slack)
        if name == "gaussian":
            # an independent computation: k Gaussian releases compose to one Gaussian mechanism with
            # mu = sqrt(k) d / sigma_g, whose exact delta (Balle & Wang 2018) the empirical one estimates
            # (6 standard errors, two-sided: a false failure about 2e-9)
            m = make_mechanism(*sequence[0][:1], 1.0, *sequence[0][1:])
            mu = math.sqrt(len(sequence)) * (_snap(1, m.k) - _snap(0, m.k)) / m._grid_sigma
            exact = gaussian_delta(1.0, mu, epsilon)
            assert abs(mean - exact) < 6 * float(np.std(np.maximum(0.0, -np.expm1(epsilon - losses)))) / math.sqrt(N)
            # and the loss has mean mu^2 / 2, at most the charged rho
            assert abs(losses.mean() - mu * mu / 2) < 6 * losses.std() / math.sqrt(N)
            assert mu * mu / 2 <= float(_charged(sequence))


def test_the_check_detects_an_undercharge():
    """Converting a quarter of the rho actually spent must be caught (the check has power)."""
    sequence = SEQUENCES["gaussian"]
    epsilon = float(accounting.epsilon_upper(_charged(sequence) / 4, DELTA_B))
    losses = _losses(sequence, 99, False)
    mean, slack = _delta_hat(losses, epsilon)
    assert mean > float(DELTA_B) + slack
