"""The FROM clause of a private query as a small typed relation.

A Relation is the rows an aggregate reads: a first FROM item joined, step by step, with
others. Each item (an Instance) is a protected table, a public table, or a per-unit subquery
(an inner query grouped by the unit: one row per unit). The relation knows what the analysis
and the rewrite need: which column holds each row's privacy unit, whether the unit is unique
(one row per unit, so no per-unit pre-aggregation is needed), the contribution limits that
bound each unit's rows, and every column's type, declared bounds or public value domain.

Privacy argument (user-level DP over joins). Neighbouring databases differ in all the rows of
one unit u, in every protected table at once (a linked table's rows belong to the unit their
link resolves to). The analysis admits a join of two protected relations only when its ON
clause equates their units (directly, or through links to a unique key), at identical types
(no cast that could make two different ids equal), and never adds such an equality itself.
So in every joined row all non-NULL unit columns are equal: each row belongs to exactly one
unit, and removing u's rows everywhere removes exactly the joined rows that belong to u and
changes no row of any other unit. Public tables hold no unit: joining them can multiply a
unit's rows (fan-out), and so can joins of a unit's rows with its own rows; that is harmless
because bounding (per-unit pre-aggregation, the L0 group cap, the Linf clamps) is applied to
the joined relation, after every join (dpsql.rewrite), exactly as to a single table.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.policy import ColumnPolicy, Link, TablePolicy

ColRef = tuple[str, str]        # (instance alias, column name)
PER_UNIT_HITS = "_pu_hits"      # a per-unit subquery's count of its unit's rows passing its WHERE


@dataclass(frozen=True)
class ColumnInfo:
    """One column of an Instance.

    policy: the protected table's declaration (bounds, public domain, identifier), if any.
    bounds: derived bounds of a per-unit aggregate (exact), if any.
    public: the column of a public table: its values are public, so its key domain is read
        from the public table itself.
    inexact: the engine's equality on it is not the equality of its text (a non-deterministic
        collation, citext: engines.base.TableFacts.inexact); no query reads it
        (dpsql.analysis.scope.exact_equality).
    """
    name: str
    sql_type: str
    policy: ColumnPolicy | None = None
    bounds: tuple[Fraction, Fraction] | None = None
    integral: bool = False
    public: bool = False
    inexact: bool = False

    @property
    def declared(self) -> bool:
        return self.policy is not None or self.bounds is not None or self.public

    @property
    def bounded(self) -> bool:
        return self.bounds is not None or (self.policy is not None and self.policy.bounded)

    def range(self) -> tuple[Fraction, Fraction]:
        if self.bounds is not None:
            return self.bounds
        assert self.policy is not None and self.policy.bounded
        return self.policy.exact_range()

    @property
    def whole_bounds(self) -> bool:
        if self.bounds is not None:
            return self.integral and all(b.denominator == 1 for b in self.bounds)
        return self.policy is not None and self.policy.is_integral

    @property
    def domain(self) -> tuple[Any, ...] | None:
        return self.policy.values if self.policy is not None else None

    @property
    def span(self):
        """A DATE column's declared bounds (datetime.date, datetime.date), if any."""
        return self.policy.span if self.policy is not None else None

    @property
    def identifier(self) -> bool:
        return self.policy is not None and self.policy.identifier


@dataclass(frozen=True)
class PerUnitAggregate:
    """One output of a per-unit subquery: kind count | sum | avg | min | max of `input` (a
    qualified column of the inner relation; None for COUNT(*)), clamped to `bounds`.
    row: each input row's clamp bounds (on the 10^-s grid of `scale`: sums and averages are of
    round(x * scale) as exact integers)."""
    name: str
    kind: str
    input: exp.Expression | None
    bounds: tuple[Fraction, Fraction]
    row: tuple[Fraction, Fraction] | None = None
    scale: int = 1


@dataclass(frozen=True)
class PerUnit:
    """An inner query grouped by the unit: `SELECT unit, agg AS name, ... FROM relation WHERE p
    GROUP BY unit`. One row per unit whose rows pass p; every aggregate clamped to its bounds."""
    relation: Relation
    where: exp.Expression | None
    unit_name: str                     # the unit's output name
    aggregates: tuple[PerUnitAggregate, ...]
    rows_per_unit: int                 # a unit's rows counted in all (max rows x max groups)


@dataclass(frozen=True)
class Instance:
    """One FROM item.

    kind: protected | public | per_unit. ref: what the engine reads (a protected table's source,
    a public table's name). unit: the unit column (None for public tables and linked tables,
    whose unit comes through `link`). unique: the engine (PRIMARY KEY/UNIQUE) or the construction
    (GROUP BY unit) guarantees one row per unit. rows/groups: the contribution limits of its rows.
    """
    alias: str
    kind: str
    ref: str
    columns: Mapping[str, ColumnInfo]
    unit: str | None = None
    link: Link | None = None
    unique: bool = False
    not_null: bool = False
    rows: int = 1
    groups: int = 1
    policy: TablePolicy | None = None
    per_unit: PerUnit | None = None
    implicit: bool = False             # added by dpsql to resolve a link, not written by the analyst

    @property
    def protected(self) -> bool:
        return self.kind != "public"


@dataclass(frozen=True)
class JoinStep:
    """`kind JOIN instance ON on`: on is the validated condition (column equalities)."""
    kind: str                          # inner | left
    instance: Instance
    on: exp.Expression


@dataclass(frozen=True)
class SemiJoin:
    """A per-unit membership test from WHERE: `unit [NOT] IN (SELECT unit FROM relation WHERE p)`
    or [NOT] EXISTS with unit equality, or with a link key's equality (an order's line items:
    dpsql.analysis.semijoin). Each unit's answer depends only on its own rows in the inner
    relation, so the test is a per-unit filter. `name` is the flag's alias in the rewrite."""
    name: str
    relation: Relation
    where: exp.Expression | None
    outer: ColRef                      # the outer column it is tested against (the unit, or a linked key)
    inner: ColRef | None = None        # the inner column tested (None: the inner relation's unit)


@dataclass(frozen=True)
class Relation:
    first: Instance
    joins: tuple[JoinStep, ...] = ()
    unit: ColRef | None = None         # the column bounding groups rows by (None: no protected data)
    unit_unique: bool = False
    unit_not_null: bool = False
    rows_per_unit: int = 1
    groups_per_unit: int = 1
    semi: tuple[SemiJoin, ...] = ()
    unit_class: frozenset[ColRef] = frozenset()   # every column equal to the unit in every row

    @property
    def instances(self) -> tuple[Instance, ...]:
        return (self.first,) + tuple(j.instance for j in self.joins)

    def instance(self, alias: str) -> Instance | None:
        for i in self.instances:
            if i.alias == alias:
                return i
        return None

    def column(self, alias: str, name: str) -> ColumnInfo | None:
        inst = self.instance(alias)
        return None if inst is None else inst.columns.get(name)

    @property
    def protected(self) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.protected)

    @property
    def policies(self) -> tuple[TablePolicy, ...]:
        """The protected tables read (per-unit subqueries and semi-joins included)."""
        out: list[TablePolicy] = []
        for rel in self.walk():
            for i in rel.instances:
                if i.policy is not None and i.policy not in out:
                    out.append(i.policy)
        return tuple(out)

    def refs(self) -> tuple[tuple[str, str], ...]:
        """(kind, engine reference) of every table read, nested relations included."""
        out: list[tuple[str, str]] = []
        for rel in self.walk():
            for i in rel.instances:
                if i.kind != "per_unit" and (i.kind, i.ref) not in out:
                    out.append((i.kind, i.ref))
        return tuple(out)

    def walk(self):
        """This relation and every relation nested in it (per-unit subqueries, semi-joins)."""
        yield self
        for i in self.instances:
            if i.per_unit is not None:
                yield from i.per_unit.relation.walk()
        for s in self.semi:
            yield from s.relation.walk()


@dataclass
class UnitClasses:
    """Union-find over columns equated by join conditions (only equalities at identical types)."""
    parent: dict[ColRef, ColRef] = field(default_factory=dict)

    def find(self, c: ColRef) -> ColRef:
        self.parent.setdefault(c, c)
        while self.parent[c] != c:
            self.parent[c] = self.parent[self.parent[c]]
            c = self.parent[c]
        return c

    def union(self, a: ColRef, b: ColRef) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def same(self, a: ColRef, b: ColRef) -> bool:
        return self.find(a) == self.find(b)

    def members(self, c: ColRef) -> frozenset[ColRef]:
        root = self.find(c)
        return frozenset(x for x in list(self.parent) if self.find(x) == root)
