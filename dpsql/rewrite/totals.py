"""Pass 4, totals: per group, the sum over units of each unit's clamped contribution.

    SELECT _g0, SUM(LEAST(_v0, m)) AS _v0, ..., COUNT(*) AS _units
    FROM (<per unit>) AS _per_unit WHERE _rank <= L0 AND _hits > 0 GROUP BY _g0

After it, one unit touches at most L0 = max_groups_per_unit groups and moves each by at most
Linf (Measure.bounded_total, dpsql.analysis.measures): the bounds dpsql.analysis.sensitivity turns into
sensitivities. `_units` (the number of units in the group) is what partition selection
thresholds, when a key has no public domain.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.per_unit import PER_UNIT
from dpsql.rewrite.rows import _and, subquery


def units_column(plan: QueryPlan) -> list[exp.Expression]:
    """COUNT(*) AS _units in the final aggregation, when partition selection needs it."""
    if plan.selection is None:
        return []
    return [exp.alias_(exp.Count(this=exp.Star()), "_units", copy=False)]


def totals(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    keys = [exp.column(k.name) for k in plan.keys]
    cols: list[exp.Expression] = [k.copy() for k in keys]
    cols += [exp.alias_(m.bounded_total(plan.rows_per_unit, d), m.name, copy=False) for m in plan.measures]
    cols += units_column(plan)
    keep = []
    if plan.group_choice:
        keep.append(exp.LTE(this=exp.column("_rank"), expression=exp.Literal.number(plan.l0)))
    if plan.where is not None:
        keep.append(exp.GT(this=exp.column("_hits"), expression=exp.Literal.number(0)))
    if d.sorted_per_unit and not plan.group_choice:
        tree.set("order", exp.Order(expressions=[exp.Ordered(this=exp.column("_u"))]))
    args: dict = {"expressions": cols, "from_": exp.From(this=subquery(tree, PER_UNIT))}
    if keep:
        args["where"] = exp.Where(this=_and(keep))
    if keys:
        args["group"] = exp.Group(expressions=keys)
    return exp.Select(**args)
