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


def salted_hash(values: list[exp.Expression], d: EngineDialect) -> exp.Expression:
    return d.salted_hash(values, exp.Placeholder(this=SALT))


def group_choice(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if not plan.group_choice:
        return tree
    order = [exp.Ordered(this=salted_hash([exp.column("_u"), *[exp.column(k.name) for k in plan.keys]], d))]
    h = hits(plan)
    if h is not None:
        first = exp.Case(ifs=[exp.If(this=exp.GT(this=h, expression=exp.Literal.number(0)),
                                     true=exp.Literal.number(0))], default=exp.Literal.number(1))
        order.insert(0, exp.Ordered(this=first))
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("_u")], order=exp.Order(expressions=order))
    tree.append("expressions", exp.alias_(rank, "_rank", copy=False))
    return tree
