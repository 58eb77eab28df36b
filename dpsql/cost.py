"""Privacy cost and its composition.

Sequential composition: running several mechanisms on the same data costs the sum
of their (epsilon, delta). Parallel composition: mechanisms on disjoint sets of
privacy units cost the maximum (Dwork & Roth 2014, Thm 3.14 and McSherry 2009).
dpsql applies parallel composition only across GROUP BY partitions after contribution
bounding has limited each unit to `max_groups_per_unit` groups, where the
per-group sensitivity is multiplied by that limit instead (Wilson et al. 2020).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, slots=True)
class Cost:
    """An (epsilon, delta) privacy cost."""
    epsilon: float
    delta: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta)


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
