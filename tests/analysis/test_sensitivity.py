"""Sensitivities are rounded up, never down, and follow L1 = L0*Linf, L2 = sqrt(L0)*Linf."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpsql.analysis import sensitivity as sens
from dpsql.analysis.measures import CenteredSum, Count, Sum


@pytest.mark.parametrize("linf", [Fraction(1, 3), Fraction(250000), Fraction(1, 10**6) * 123456789,
                                  Fraction(2**60 + 1)])
@pytest.mark.parametrize("l0", [1, 2, 3, 7])
def test_rounded_up(linf, l0):
    assert Fraction(sens.l1(linf, l0)) >= linf * l0
    l2 = sens.l2(linf, l0)
    assert Fraction(l2) ** 2 >= linf ** 2 * l0
    assert l2 <= float(linf) * math.sqrt(l0) * (1 + 1e-12)


def test_per_group_bounds():
    count = Count("_v0", None)
    assert count.per_group_bound(5) == 5
    s = Sum("_v1", "x", lo=Fraction(-3), hi=Fraction(10), scale=1)
    assert s.per_group_bound(2) == 20
    c = CenteredSum("_v2", "x", lo=Fraction(-3), hi=Fraction(10), scale=1)
    assert c.per_group_bound(2) == 13


def test_selection_threshold_hides_single_units():
    # P(1 + Lap(L0/eps) > tau) * L0 = delta exactly at the threshold
    eps, delta, l0 = 0.5, 1e-8, 2
    tau = sens.selection_threshold(eps, delta, l0)
    p_pass = 0.5 * math.exp(-(tau - 1) * eps / l0)
    assert p_pass * l0 == pytest.approx(delta, rel=1e-9)
