"""Automatic clipping bounds with the sparse vector technique (AboveThreshold).

A column the data owner declares `bounds = "auto"` with an outer hard range [lower, upper] gets
the upper clip of a SUM or AVG chosen privately, query by query, at SHARE (10%) of the query's
epsilon; the SUM/AVG is then planned with [lower, chosen] and noised as usual with the remaining
90% (dpsql.planner.auto_bound runs it; the count query is
dpsql.rewrite.auto_bounds.count_select). EXPLAIN DP shows the split.

Procedure. Candidates c_1 < ... < c_m (m = GRID) on a geometric grid in the hard range:
c_j = lower + (upper - lower) / 2^(m - j), the last one the hard upper bound. One engine query
computes, for every candidate, q_j = the number of distinct units with a row (passing the
analyst's WHERE) whose value exceeds c_j (COUNT(DISTINCT CASE WHEN ... THEN unit END), one row
back, no rows into Python). AboveThreshold then walks j = 1..m and stops at the first j with

    q_j + nu_j  <=  T + rho,    rho ~ Lap(1/eps1),  nu_j ~ Lap(2/eps2),  eps1 = eps2 = eps_svt / 2

(the first candidate above which few units' values remain); none: the hard upper bound.
T = (2 / eps2) ln(m), public. Only the index j is used.

Claim: the choice of j is eps_svt-differentially private (eps_svt = eps1 + eps2), so the query is
(eps_svt + eps_rest, delta)-DP by sequential composition: the SUM/AVG that follows is planned
with the chosen bound as if it were declared, at eps_rest, and its sensitivity follows from that
bound (dpsql.analysis.sensitivity).

Argument (Lyu, Su & Li, "Understanding the Sparse Vector Technique for Differential Privacy",
PVLDB 2017, Algorithm 1 with c = 1, Theorem 2; Dwork & Roth 2014, Algorithm 1 / Theorem 3.23):
adding or removing one unit changes each q_j by at most Delta = 1 (the unit is counted at most
once per candidate, whatever its rows or groups). With threshold noise Lap(Delta/eps1) and query
noise Lap(2 c Delta/eps2), c = 1 positive answer, AboveThreshold is (eps1 + eps2)-DP; the query
noise is never reused, and nothing but the stopping index leaves it (not the noisy counts, not
the noisy threshold). Our test is AboveThreshold on the queries -q_j against the threshold -T
(their sensitivity is the same). Several variants in the literature are not private (Lyu et al.
section 3: no threshold noise refresh, query noise not scaled by 2c, outputting noisy values);
this follows their correct version. The Laplace samples are the exact discrete samplers of
dpsql.noise (no floating-point leak).

The count query runs before the ledger charge, which the main query makes before it runs; if the
charge is refused nothing is released, and the result of the count query is discarded. Its run
time is covered by the release quantum, like the main query's.

Test: tests/analysis/test_auto_bounds.py, tests/integration/test_auto_bounds_engines.py.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.analysis.measures import Count, SampleAggregate
from dpsql.errors import QueryRejected

SHARE = Fraction(1, 10)     # of the query's epsilon, for choosing the bound
GRID = 32                   # candidates


@dataclass(frozen=True, slots=True)
class AutoBound:
    """One auto-bounded column of a plan: where it is, its hard range and candidates, the SVT's
    epsilon, threshold; after the choice, the chosen bound."""
    table: str                   # its policy table
    alias: str                   # the FROM item reading it
    column: str
    lower: Fraction
    upper: Fraction
    candidates: tuple[Fraction, ...]
    epsilon: float
    threshold: float
    chosen: Fraction | None = None

    @property
    def rho(self) -> Fraction:
        """zCDP cost: an eps-DP mechanism is eps^2/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        e = Fraction(self.epsilon)
        return e * e / 2

    def describe(self) -> str:
        how = (f"chosen: upper clip {_num(self.chosen)}" if self.chosen is not None
               else "upper clip chosen when the query runs")
        return (f"bounds = \"auto\" on {self.table}.{self.column}: AboveThreshold (Lyu, Su & Li 2017) over "
                f"{len(self.candidates)} geometric candidates in [{_num(self.lower)}, {_num(self.upper)}] picks the "
                f"first whose noisy count of units above falls below the threshold {self.threshold:.1f}, at "
                f"epsilon {self.epsilon:g} ({float(SHARE):.0%} of the query's); the aggregates use the rest; {how}")


def candidates(lower: Fraction, upper: Fraction, whole: bool) -> tuple[Fraction, ...]:
    """c_j = lower + (upper - lower) / 2^(m - j), rounded up to whole numbers (integer columns) or
    to 10^-6, distinct, the last one upper."""
    out: list[Fraction] = []
    for j in range(1, GRID + 1):
        c = lower + (upper - lower) / 2 ** (GRID - j)
        q = 1 if whole else 10**6
        c = min(upper, Fraction(math.ceil(c * q), q))
        if not out or c > out[-1]:
            out.append(c)
    return tuple(out)


def find(plan, policy, epsilon: float) -> AutoBound | None:
    """The plan's auto-bounded column, if a SUM or AVG reads one (and the checks it needs)."""
    rel = plan.relation
    found: set[tuple[str, str]] = set()
    for m in plan.measures:
        sample = m.sample if isinstance(m, SampleAggregate) else None
        if m.input is None and sample is None:
            continue
        exprs = [m.input] if m.input is not None else [sample.first, sample.second]
        for e in exprs:
            for col in e.find_all(exp.Column):
                inst = rel.instance(col.table) if rel is not None else None
                cp = inst.policy.column(col.name) if inst is not None and inst.policy is not None else None
                if cp is None or not cp.auto:
                    continue
                if isinstance(m, Count):
                    continue        # COUNT(col) does not clip
                if sample is not None or e is not m.input or not isinstance(e, exp.Column):
                    raise QueryRejected(f"{cp.name} inside an expression or a sample-and-aggregate function",
                                        "its bounds are chosen automatically only for SUM and AVG of the column")
                found.add((col.table, col.name.lower()))
    if not found:
        return None
    if len(found) > 1:
        raise QueryRejected("two auto-bounded columns in one query", "each needs its own bound choice",
                            "ask them in separate queries")
    alias, name = found.pop()
    inst = rel.instance(alias)
    cp = inst.policy.column(name)
    lo, hi = cp.exact_range()
    info = inst.columns.get(name)
    whole = cp.is_integral and info is not None and info.integral
    cands = candidates(lo, hi, bool(whole))
    eps = float(Fraction(epsilon) * SHARE)
    eps2 = eps / 2
    return AutoBound(inst.policy.name, alias, name, lo, hi, cands, eps, (2 / eps2) * math.log(len(cands)))


def above_threshold(counts, auto: AutoBound, rng, laplace) -> int | None:
    """The index of the first candidate whose noisy count is at most the noisy threshold, or None.
    laplace(sensitivity, epsilon, value, rng) -> value + Laplace(sensitivity/epsilon) noise. The
    counts are exact integers from the engine; a missing one (NULL: no rows) is 0."""
    eps1 = eps2 = auto.epsilon / 2
    t = laplace(1.0, eps1, auto.threshold, rng)          # rho: once
    for j, q in enumerate(counts):
        if -laplace(2.0, eps2, -int(q or 0), rng) <= t:   # fresh nu_j, scale 2/eps2 (c = 1)
            return j
    return None


def with_bound(policy, auto: AutoBound, bound: Fraction):
    """The policy with the column's upper bound set to the chosen one (the rest unchanged)."""
    table = policy.tables[auto.table]
    cp = table.columns[auto.column]
    cols = dict(table.columns)
    cols[auto.column] = dataclasses.replace(cp, upper=float(bound))
    tables = dict(policy.tables)
    tables[auto.table] = dataclasses.replace(table, columns=cols)
    return dataclasses.replace(policy, tables=tables)


def _num(v: Any) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"
