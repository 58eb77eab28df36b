"""QueryPlan: the frozen result of analysing one private query.

Everything the later steps need (rewrite, noise, post-processing, EXPLAIN DP) is
here; nothing about a query lives on the Session or the engine.

Post-processing expressions (SELECT arithmetic, HAVING, ORDER BY, outer queries) are small trees
of the typed nodes of dpsql.postprocess.expr (Lit, Ref, Key, Avg, Var, Clamp, Neg, Add, Sub, Mul,
Div, Cmp, And, Or, Not, IsNull, Win), so that post-processing needs no sqlglot.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpsql.analysis.measures import Measure, NoiseSpec
from dpsql.analysis.relation import Relation
from dpsql.ledger.accounting import Cost
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
    where_rows: bool = False       # [timing] where = "rows": WHERE filters rows, fenced (dpsql.rewrite.rows)

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
