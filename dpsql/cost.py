"""Privacy cost and its composition.

Sequential composition: running several mechanisms on the same data costs the sum
of their (epsilon, delta). Parallel composition: mechanisms on disjoint sets of
privacy units cost the maximum (Dwork & Roth 2014, Thm 3.14 and McSherry 2009).
dpsql applies parallel composition only across GROUP BY partitions after contribution
bounding has limited each unit to `max_groups_per_unit` groups, where the
per-group sensitivity is multiplied by that limit instead (Wilson et al. 2020).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class Cost:
    """An (epsilon, delta) privacy cost, and, once the mechanisms are known, its zero-concentrated
    DP cost: rho (exact) and the delta outside zCDP (partition selection). See dpsql.accounting."""
    epsilon: float
    delta: float = 0.0
    rho: Fraction | None = None          # None: not (yet) computed
    zcdp_delta: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        rho = None if self.rho is None or other.rho is None else self.rho + other.rho
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, rho,
                    self.zcdp_delta + other.zcdp_delta)


ZERO = Cost(0.0, 0.0)


def sequential(costs: Iterable[Cost]) -> Cost:
    """Total cost of mechanisms run one after another on the same units."""
    total = ZERO
    for c in costs:
        total = total + c
    return total


def parallel(costs: Iterable[Cost]) -> Cost:
    """Cost of mechanisms run on disjoint sets of units: the maximum of each part."""
    costs = list(costs)
    if not costs:
        return ZERO
    return Cost(max(c.epsilon for c in costs), max(c.delta for c in costs))
