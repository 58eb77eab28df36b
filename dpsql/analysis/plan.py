"""QueryPlan: the frozen result of analysing one private query.

Everything the later steps need (rewrite, noise, post-processing, EXPLAIN DP) is
here; nothing about a query lives on the Session or the engine.

Post-processing expressions (SELECT arithmetic, HAVING, ORDER BY, outer queries) are small trees
of the typed nodes of dpsql.postprocess.expr (Lit, Ref, Key, Avg, Var, Clamp, Neg, Add, Sub, Mul,
Div, Cmp, And, Or, Not, IsNull, Win), so that post-processing needs no sqlglot.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.analysis.relation import Relation
from dpsql.cost import Cost
from dpsql.postprocess.expr import Expr
from dpsql.policy import TablePolicy


@dataclass(frozen=True, slots=True)
class GroupKey:
    """One GROUP BY column.

    domain: the public values it releases (all of them, empty groups included): declared in the
    policy, or read from a public table (domain_source, the Session fills domain in before the
    query runs); None: thresholded partition selection."""
    name: str                       # column name in the rewritten SQL, e.g. "_g0"
    column: str                     # the column's name, for people (EXPLAIN DP)
    domain: tuple[Any, ...] | None
    expr: exp.Expression | None = None          # the qualified column the rewrite groups by
    sql_type: str = ""
    domain_source: tuple[str, str] | None = None    # (public table, column)
    null_in_domain: bool = False    # a LEFT JOIN can leave the public key NULL: NULL is a value too
    derived: str | None = None      # an expression key's derived range and domain, for EXPLAIN DP


@dataclass(frozen=True, slots=True)
class Measure:
    """A per-group aggregate computed exactly in the engine, then noised.

    kind "count": per unit and group, COUNT(*) or COUNT(column) clamped to
    max_rows_per_unit. kind "sum": each row clamped to [lo, hi] and held as an exact
    integer: the value itself for integer columns with whole bounds (scale 1), else
    round(x * scale) with scale = 10^s and the bounds rounded outward to that grid;
    per unit and group the sum is clamped to max_rows_per_unit * [lo, hi]. Centered
    sums (AVG's numerator) are 2*sum - (lo + hi)*count, so they stay integral; squared
    sums (VARIANCE's) are sums of (2x - (lo + hi))^2, in the wide integer type. The
    released value is the engine's integer divided by `divisor`.

    input: the row expression aggregated (a qualified column, or a derived expression whose
    columns are clamped to their bounds: dpsql.analysis.expressions). filter: the aggregate's
    own FILTER (WHERE ...) condition, checked like WHERE. cap: each unit's per-group count clamp
    when it is not max_rows_per_unit (COUNT(DISTINCT unit): 1).
    """
    name: str
    kind: str                  # "count" | "sum" | "sample" (sample-and-aggregate)
    column: str | None         # None: COUNT(*)
    centered: bool = False
    lo: Fraction = Fraction(0)  # per-row bounds in value units (on the scale grid)
    hi: Fraction = Fraction(0)
    scale: int = 1             # integers in the engine are value * scale
    label: str = ""
    input: exp.Expression | None = None     # the row expression aggregated (None: COUNT(*))
    filter: exp.Expression | None = None    # the aggregate's own FILTER (WHERE ...)
    squared: bool = False      # sum of (2x - (lo + hi))^2 (VARIANCE, STDDEV)
    cap: int | None = None     # per-unit count clamp instead of max_rows_per_unit
    derived: str | None = None # a row expression's derived range, for EXPLAIN DP
    sample: Any = None         # kind "sample": dpsql.analysis.sample_aggregate.SampleAggregate
    cast_in_bounds: bool = False  # the scaled cast alone lands in [lo_int, hi_int] (dpsql.rewrite.clip.cast_in_bounds)

    @property
    def divisor(self) -> int:
        if self.sample is not None:     # the centered sum of k block values: mean = mid + total / divisor
            return 2 * self.scale * self.sample.blocks
        if self.squared:
            return 4 * self.scale * self.scale
        return self.scale * (2 if self.centered else 1)

    @property
    def lo_int(self) -> int:
        return int(self.lo * self.scale)

    @property
    def hi_int(self) -> int:
        return int(self.hi * self.scale)


@dataclass(frozen=True, slots=True)
class NoiseSpec:
    """The mechanism for one measure (or for partition selection)."""
    target: str           # measure name, or "_units" for partition selection
    mechanism: str        # laplace | gaussian | gaussian_classic | exponential (a quantile) | noisy_max (top-k)
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


@dataclass(frozen=True, slots=True)
class Wrap:
    """Post-processing by an outer query (a BI tool's wrapper) over the released rows:
    outputs (name, expr over the inner outputs by position: Key(i)), a filter, an order, a
    limit; the same small expression trees as HAVING."""
    outputs: tuple[tuple[str, Expr], ...]
    where: Expr | None
    order: tuple[tuple[Expr, bool, bool], ...]
    limit: int | None
    offset: int


@dataclass(frozen=True)
class QueryPlan:
    text: str                      # normalized analyst SQL
    table: TablePolicy             # the first protected table read (for people; the relation has them all)
    table_ref: str                 # its engine reference
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
    units_only: bool = False       # every measure is COUNT(*) and max_rows_per_unit = 1:
                                   # each kept unit adds exactly 1 to its group
    unit_not_null: bool = False    # the engine guarantees the unit is never NULL
    subset: Any = None             # analysis.reconstruction.SubsetPattern of the WHERE
    relation: Relation | None = None   # FROM: tables, joins, per-unit subqueries, semi-joins
    rows_per_unit: int = 1         # each unit's per-group count clamp (max rows of the joined relation)
    wraps: tuple[Wrap, ...] = ()   # outer queries over the released rows, innermost first
    names: tuple[str, ...] = ()    # the final output column names
    quantiles: tuple = ()          # analysis.quantiles.Quantile: exponential-mechanism measures
    distincts: tuple = ()          # analysis.distinct.DistinctCount: COUNT(DISTINCT col) of a non-unit column
    auto: Any = None               # bounds = "auto": dpsql.analysis.auto_bounds.AutoBound
    topk: Any = None               # SET dpsql.topk = 'noisy_max': dpsql.analysis.topk.TopK
    public_reads: bool = False     # a public column's range was read from its table (the plan is not kept)

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        """(kind, engine reference) of every relation read: protected and public."""
        return self.relation.refs() if self.relation is not None else (("protected", self.table_ref),)

    @property
    def grouped(self) -> bool:
        return bool(self.keys)

    def measure(self, name: str) -> Measure:
        for m in self.measures:
            if m.name == name:
                return m
        raise KeyError(name)
