"""QueryPlan: the frozen result of analysing one private query.

Everything the later steps need (rewrite, noise, post-processing, EXPLAIN DP) is
here; nothing about a query lives on the Session or the engine.

Post-processing expressions (SELECT arithmetic, HAVING, ORDER BY) are small tuple
trees, so that post-processing needs no sqlglot:

    ("lit", value)              a literal
    ("ref", name)               a noisy measure, by its column name in the rewrite
    ("key", i)                  the i-th GROUP BY key (exact: keys are public or selected)
    ("avg", s, c, lo, hi)       clamp(mid + s/max(c, 1), lo, hi), mid=(lo+hi)/2, s the
                                centered sum in value units (the Session divides by Measure.divisor)
    ("neg", a)  ("add"|"sub"|"mul"|"div", a, b)
    ("cmp", op, a, b)           op in = <> < <= > >=
    ("and", a, b) ("or", a, b) ("not", a) ("isnull", a, negated)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.cost import Cost
from dpsql.policy import TablePolicy

Expr = tuple


@dataclass(frozen=True, slots=True)
class GroupKey:
    """One GROUP BY column."""
    name: str                       # column name in the rewritten SQL, e.g. "_g0"
    column: str                     # the protected table's column
    domain: tuple[Any, ...] | None  # declared public values, or None (partition selection)


@dataclass(frozen=True, slots=True)
class Measure:
    """A per-group aggregate computed exactly in the engine, then noised.

    kind "count": per unit and group, COUNT(*) or COUNT(column) clamped to
    max_rows_per_unit. kind "sum": each row clamped to [lo, hi] (exactly: integers,
    or DECIMAL with bounds rounded outward), per unit and group clamped to
    max_rows_per_unit * [lo, hi]. centered sums (AVG's numerator) sum
    2*x - (lo + hi) so that they stay integral; the released value is engine/2.
    """
    name: str
    kind: str                  # "count" | "sum"
    column: str | None         # None: COUNT(*)
    centered: bool = False
    lo: Fraction = Fraction(0)
    hi: Fraction = Fraction(0)
    sql_type: str | None = None  # exact type for sums: "int" or "decimal(p,s)"
    label: str = ""

    @property
    def divisor(self) -> int:
        return 2 if self.centered else 1


@dataclass(frozen=True, slots=True)
class NoiseSpec:
    """The mechanism for one measure (or for partition selection)."""
    target: str           # measure name, or "_units" for partition selection
    mechanism: str        # laplace | gaussian | gaussian_classic
    l1: float             # L1 sensitivity over all groups (L0 * Linf)
    l2: float             # L2 sensitivity over all groups (sqrt(L0) * Linf)
    linf: float           # per-group bound
    epsilon: float
    delta: float

    @property
    def sensitivity(self) -> float:
        return self.l1 if self.mechanism == "laplace" else self.l2


@dataclass(frozen=True, slots=True)
class Selection:
    """Thresholded partition selection for keys with no public domain."""
    epsilon: float
    delta: float
    l0: int
    threshold: float


@dataclass(frozen=True, slots=True)
class Output:
    name: str
    expr: Expr
    noisy: bool
    text: str          # the analyst's expression, for EXPLAIN DP


@dataclass(frozen=True)
class QueryPlan:
    text: str                      # normalized analyst SQL
    table: TablePolicy
    table_ref: str                 # what the rewrite reads
    bounded: bool                  # False: the unit is unique (PK), no per-unit pre-aggregation
    l0: int                        # groups one unit can touch in this query
    keys: tuple[GroupKey, ...]
    measures: tuple[Measure, ...]
    noise: tuple[NoiseSpec, ...]
    selection: Selection | None
    selection_noise: NoiseSpec | None
    outputs: tuple[Output, ...]
    where: exp.Expression | None   # validated row predicate, columns unqualified
    having: Expr | None
    order: tuple[tuple[Expr, bool, bool], ...]   # (expr, desc, nulls_first)
    limit: int | None
    offset: int
    cost: Cost
    mechanism: str
    group_choice: bool             # whether the salted per-unit group choice is needed
    domain_size: int | None        # number of public groups, when every key is public

    @property
    def grouped(self) -> bool:
        return bool(self.keys)

    def measure(self, name: str) -> Measure:
        for m in self.measures:
            if m.name == name:
                return m
        raise KeyError(name)
