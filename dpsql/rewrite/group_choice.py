"""Pass 3, group_choice: rank each unit's groups by a salted hash, when a unit could reach more
groups than max_groups_per_unit allows (plan.group_choice).

    ..., ROW_NUMBER() OVER (PARTITION BY _u ORDER BY [CASE WHEN <hits> > 0 THEN 0 ELSE 1 END,]
                            hash(_u, _g0, ..., salt)) AS _rank

The totals pass keeps rank <= L0. The choice depends only on the unit's own rows and a salt: a
fresh 63-bit secret from the OS CSPRNG for every query, passed as a bound parameter (never the
engine's random(), never anything the analyst can set or replay), so the analyst can neither
predict nor steer which groups are kept. With a WHERE, groups with passing rows rank first, so
among them the rank is exactly the one the filtered rows would give.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.per_unit import hits

SALT = "salt"


def salted_hash(values: list[exp.Expression], d: EngineDialect, types: list[str] | None = None) -> exp.Expression:
    """The engine's salted hash of values; types: their SQL types where known (a cheaper hash on
    PostgreSQL, dpsql.dialects)."""
    return d.salted_hash(values, types, exp.Placeholder(this=SALT))


def unit_type(plan: QueryPlan) -> str:
    """The SQL type of the rows pass's _u ("" when unknown)."""
    rel = plan.relation
    info = rel.column(*rel.unit) if rel is not None and rel.unit is not None else None
    return info.sql_type if info is not None else ""


def unit_keys_hash(plan: QueryPlan, d: EngineDialect) -> exp.Expression:
    """The salted hash of _u and the group keys' columns."""
    return salted_hash([exp.column("_u"), *[exp.column(k.name) for k in plan.keys]], d,
                       [unit_type(plan), *[k.sql_type for k in plan.keys]])


def group_choice(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if not plan.group_choice:
        return tree
    # The keys after the hash: a tie (two of a unit's groups hashing alike) is broken by the
    # unit's own values, never by the order other units' rows arrive in.
    order = [exp.Ordered(this=unit_keys_hash(plan, d)),
             *[exp.Ordered(this=exp.column(k.name)) for k in plan.keys]]
    h = hits(plan)
    if h is not None:
        first = exp.Case(ifs=[exp.If(this=exp.GT(this=h, expression=exp.Literal.number(0)),
                                     true=exp.Literal.number(0))], default=exp.Literal.number(1))
        order.insert(0, exp.Ordered(this=first))
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("_u")], order=exp.Order(expressions=order))
    tree.append("expressions", exp.alias_(rank, "_rank", copy=False))
    return tree
