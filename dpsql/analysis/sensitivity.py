"""Per-aggregate sensitivity from declared bounds and contribution limits.

User-level bounding (Wilson, Zhang, Lam, Desfontaines, Simmons-Marengo & Gipson,
"Differentially Private SQL with Bounded User Contribution", PoPETs 2020): after the
rewrite, one privacy unit contributes to at most L0 groups, and to each group at most
Linf (in absolute value) for each measure. Adding or removing the unit then moves
the vector of per-group measures by at most

    L1 = L0 * Linf      L2 = sqrt(L0) * Linf

(each of at most L0 coordinates moves by at most Linf). The per-group bounds (each
measure class's per_group_bound, dpsql.analysis.measures), enforced by dpsql.rewrite (per_unit,
group_choice, totals) and dpsql.rewrite.clip:

* count: each unit's per-group count is clamped to m = max_rows_per_unit, so
  Linf = m.
* sum: each row is clamped to [lo, hi]; a unit has 1 to m rows in a group, so its
  per-group sum lies in [min(0, m*lo), max(0, m*hi)] (not [m*lo, m*hi]: with lo > 0 a
  unit of one row sums to lo < m*lo), and is clamped to that interval; adding or removing
  the unit moves the group's sum by its own sum, so Linf = m * max(|lo|, |hi|).
* centered sum (AVG): rows become x - mid with mid = (lo+hi)/2, in [-h, h] with
  h = (hi-lo)/2, unit sums clamped to [-m*h, m*h], so Linf = m * h.
* squared sum (VARIANCE): rows become (x - mid)^2 in [0, h^2], unit sums clamped to
  [0, m*h^2], so Linf = m * h^2.
* sample-and-aggregate: the mean of k block values each clamped to [lo, hi], one unit in one
  block, so Linf = (hi - lo) / k (dpsql.analysis.sample_aggregate).
* a count with its own clamp (COUNT(DISTINCT unit): each unit counts once per group): Linf =
  that clamp.

When the engine guarantees that the unit is unique (PRIMARY KEY / UNIQUE), each unit
has exactly one row: L0 = 1 and m = 1, with no pre-aggregation needed.
Sums are computed exactly (integers or DECIMAL), so floating-point accumulation
cannot exceed these bounds (Casacuberta et al., CCS 2022).
"""
from __future__ import annotations

import math
from fractions import Fraction


def _up(x: Fraction) -> float:
    """The smallest float >= x (float() rounds to nearest, possibly down)."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def l1(linf: Fraction, l0: int) -> float:
    """L0 * Linf, rounded up to a float."""
    return _up(linf * l0)


def l2(linf: Fraction, l0: int) -> float:
    """sqrt(L0) * Linf, rounded up: sqrt and the product may each round down by half
    an ulp, so step up two ulps."""
    if l0 == 1:
        return _up(linf)
    return math.nextafter(math.nextafter(_up(linf) * math.sqrt(l0), math.inf), math.inf)


def selection_threshold(epsilon: float, delta: float, l0: int) -> float:
    """Threshold for releasing a key whose unit count got Laplace(L0/epsilon) noise.

    A key held by a single unit passes with probability 1/2 * exp(-(tau-1)*eps/L0);
    one unit can create at most L0 keys, so tau = 1 + (L0/eps) * ln(L0 / (2*delta))
    keeps the union below delta (Korolova et al. 2009; Desfontaines et al. 2022).
    Keys held by several units are covered by the Laplace mechanism's epsilon.
    """
    return 1.0 + (l0 / epsilon) * math.log(l0 / (2.0 * delta))
