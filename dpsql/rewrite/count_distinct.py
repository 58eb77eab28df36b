"""Pass 8, count_distinct: COUNT(DISTINCT col) of a non-unit column, per group, over each unit's
bounded values (dpsql.analysis.distinct has the argument), joined to the other passes' result on
the group keys (rewrite.quantiles.attach).

    per (unit, keys, value):  the unit's distinct non-NULL values with a row passing WHERE
                              (HAVING COUNT(value) FILTER (WHERE _h) > 0: a filter after the
                              aggregation, which no engine can push into the scan)
    per (unit, keys):         ROW_NUMBER by hash(unit, value, salt) <= m
                              [DENSE_RANK of the unit's groups by hash(unit, keys, salt) <= L0]
    per keys:                 COUNT(DISTINCT value) AS _d0

The value is only grouped, hashed and compared for equality (total on every type; the salted hash
is total, dpsql.dialects); COUNT returns a BIGINT, which always loads.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.group_choice import salted_hash, unit_keys_hash, unit_type
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import hit
from dpsql.rewrite.quantiles import attach
from dpsql.rewrite.relation import filtered
from dpsql.rewrite.rows import _and, rows_select, subquery


def distinct_select(plan: QueryPlan, dc, d: EngineDialect) -> exp.Select:
    keys = [exp.column(k.name) for k in plan.keys]
    u, v = exp.column("_u"), exp.column("_dv")
    rows = rows_select(plan, d)
    rows.append("expressions", exp.alias_(dc.input.copy(), "_dv", copy=False))
    passing = filtered(exp.Count(this=v.copy()), hit(plan))     # NULL values and failing rows count 0
    per_value = exp.Select(expressions=[u.copy(), *[k.copy() for k in keys], v.copy()],
                           from_=exp.From(this=subquery(rows, "_rows")),
                           group=exp.Group(expressions=[u.copy(), *[k.copy() for k in keys], v.copy()]),
                           having=exp.Having(this=exp.GT(this=passing, expression=exp.Literal.number(0))))
    cols = [*[k.copy() for k in keys], v.copy()]
    keep = []
    if plan.bounded:
        order = exp.Order(expressions=[exp.Ordered(this=salted_hash([u.copy(), v.copy()], d, [unit_type(plan), dc.sql_type])),
                                       exp.Ordered(this=v.copy())])
        cols.append(exp.alias_(exp.Window(this=exp.RowNumber(), partition_by=[u.copy(), *[k.copy() for k in keys]],
                                          order=order), "_r", copy=False))
        keep.append(exp.LTE(this=exp.column("_r"), expression=exp.Literal.number(plan.rows_per_unit)))
        if plan.group_choice:
            rank_order = [exp.Ordered(this=unit_keys_hash(plan, d)),
                          *[exp.Ordered(this=k.copy()) for k in keys]]
            cols.append(exp.alias_(exp.Window(this=exp.Anonymous(this="DENSE_RANK"), partition_by=[u.copy()],
                                              order=exp.Order(expressions=rank_order)), "_rank", copy=False))
            keep.append(exp.LTE(this=exp.column("_rank"), expression=exp.Literal.number(plan.l0)))
    chosen = exp.Select(expressions=cols, from_=exp.From(this=subquery(per_value, "_per_value")))
    args: dict = {"expressions": [key_text(i, k.copy()) for i, k in enumerate(keys)]
                  + [exp.alias_(exp.Count(this=exp.Distinct(expressions=[v.copy()])), dc.name, copy=False)],
                  "from_": exp.From(this=subquery(chosen, "_chosen"))}
    if keep:
        args["where"] = exp.Where(this=_and(keep))
    if keys:
        args["group"] = exp.Group(expressions=[k.copy() for k in keys])
    return exp.Select(**args)


def count_distinct(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if not plan.distincts:
        return tree
    parts = [(f"_dc{i}", distinct_select(plan, dc, d), [dc.name]) for i, dc in enumerate(plan.distincts)]
    return attach(tree, plan, parts, bool(plan.measures or plan.keys))
