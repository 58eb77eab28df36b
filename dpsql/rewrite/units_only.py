"""Pass 7 (a shortcut), units_only: counting units, when every measure is COUNT(*) and each
unit's per-group count is clamped to 1 (plan.units_only): each kept unit adds exactly 1.

* No group choice: a group's bounded count is its number of distinct units (with a WHERE: of
  units with a row passing it; groups with none are dropped by HAVING, as the filtered rewrite
  never forms them):
      SELECT CAST(_g0 AS TEXT) AS _k0, COUNT(DISTINCT _u) FILTER (WHERE _h) AS _v0 ...
* One group per unit (max_groups_per_unit = 1), one key: the unit's group is the one with the
  smallest salted hash. With an arg-min aggregate (DuckDB's arg_min, Spark's min_by) that is one
  per-unit aggregation; with DISTINCT ON (PostgreSQL) one sort in the order (unit, [passing rows
  first,] salted hash). The same bound as the ranked rewrite: one group per unit, 1 in it.
* Otherwise the general rewrite stands.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.group_choice import unit_keys_hash
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import PER_UNIT, hit
from dpsql.rewrite.relation import filtered
from dpsql.rewrite.rows import ROWS, rows_select, subquery


def units_only(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if not (plan.bounded and plan.units_only):
        return tree
    cond = hit(plan)
    unit = exp.column("_u")
    rows = subquery(rows_select(plan, d), ROWS)
    keys = [exp.column(k.name) for k in plan.keys]
    if not plan.group_choice:
        count_units = filtered(exp.Count(this=exp.Distinct(expressions=[unit])), cond)
        cols = [key_text(i, k.copy()) for i, k in enumerate(keys)]
        cols += [exp.alias_(count_units.copy(), m.name, copy=False) for m in plan.measures]
        if plan.selection is not None:
            cols.append(exp.alias_(count_units.copy(), "_units", copy=False))
        args: dict = {"expressions": cols, "from_": exp.From(this=rows)}
        if keys:
            args["group"] = exp.Group(expressions=[k.copy() for k in keys])
        sel = exp.Select(**args)
        if cond is not None and plan.keys and plan.selection is not None:
            sel.set("having", exp.Having(this=exp.GT(this=count_units.copy(), expression=exp.Literal.number(0))))
        return sel
    if plan.l0 != 1 or (len(plan.keys) != 1 and not d.distinct_on):
        return tree
    if d.distinct_on:
        return _distinct_on(plan, rows, d)
    if d.arg_min is None:
        return tree
    key = keys[0]
    chosen = exp.Anonymous(this=d.arg_min, expressions=[key.copy(), unit_keys_hash(plan, d)])
    inner_cols = [exp.alias_(filtered(chosen, cond), plan.keys[0].name, copy=False)]
    if cond is not None:
        inner_cols.append(exp.alias_(filtered(exp.Count(this=exp.Star()), cond), "_hits", copy=False))
    inner = exp.Select(expressions=inner_cols, from_=exp.From(this=rows), group=exp.Group(expressions=[unit.copy()]))
    return _count_chosen(plan, inner, None if cond is None else exp.GT(this=exp.column("_hits"),
                                                                       expression=exp.Literal.number(0)))


def _distinct_on(plan: QueryPlan, rows: exp.Subquery, d: EngineDialect) -> exp.Select:
    unit = exp.column("_u")
    keys = [exp.column(k.name) for k in plan.keys]
    cond = hit(plan)
    order = [exp.Ordered(this=unit.copy())]
    cols = [k.copy() for k in keys]
    if cond is not None:
        cols.append(exp.alias_(exp.Case(ifs=[exp.If(this=cond.copy(), true=exp.Literal.number(1))],
                                        default=exp.Literal.number(0)), "_hit", copy=False))
        order.append(exp.Ordered(this=exp.column("_hit"), desc=True))
    order.append(exp.Ordered(this=unit_keys_hash(plan, d)))
    order += [exp.Ordered(this=k.copy()) for k in keys]    # ties broken by the unit's own keys
    inner = exp.Select(expressions=cols, from_=exp.From(this=rows))
    inner.set("distinct", exp.Distinct(on=exp.Tuple(expressions=[unit])))
    inner.set("order", exp.Order(expressions=order))
    keep = None if cond is None else exp.EQ(this=exp.column("_hit"), expression=exp.Literal.number(1))
    return _count_chosen(plan, inner, keep)


def _count_chosen(plan: QueryPlan, inner: exp.Select, keep: exp.Expression | None) -> exp.Select:
    keys = [exp.column(k.name) for k in plan.keys]
    cols = [key_text(i, k.copy()) for i, k in enumerate(keys)]
    cols += [exp.alias_(exp.Count(this=exp.Star()), m.name, copy=False) for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(exp.Count(this=exp.Star()), "_units", copy=False))
    args: dict = {"expressions": cols, "from_": exp.From(this=subquery(inner, PER_UNIT)),
                  "group": exp.Group(expressions=keys)}
    if keep is not None:
        args["where"] = exp.Where(this=keep)
    return exp.Select(**args)
