"""Pass 6 (a shortcut), unique_unit: when the relation proves one row per unit, skip the
per-unit level.

Applies when plan.bounded is False: the engine guarantees the unit unique (PRIMARY KEY/UNIQUE,
checked in the query's own transaction), or the relation is a per-unit subquery (one row per
unit by construction), joined only on the unit with other such relations or on a unique key of
a public table (dpsql.analysis.bind). Then each unit has one row, in one group (L0 = 1, one row
per group): clamping the row's values is all the bounding there is to do.

    SELECT CAST(_g0 AS TEXT) AS _k0, agg(_x0) FILTER (WHERE _h) AS _v0, ...,
           COUNT(*) FILTER (WHERE _h) AS _units
    FROM (<rows, without the domain filter>) AS _rows GROUP BY _g0
    HAVING CASE WHEN _g0 IN (<domain>) [AND COUNT(*) FILTER (WHERE _h) > 0] THEN TRUE ELSE FALSE END

With no group choice, filtering groups after aggregation equals filtering rows before it, and
engines do the former much faster (an IN list over every row); the CASE keeps DuckDB's optimizer
from pushing it below the aggregation, and on PostgreSQL, which moves any aggregate-free HAVING
into WHERE, so does an added COUNT(*) > 0 (true of every group; EngineDialect.having_to_where). No rows fence on PostgreSQL here: it would cost the
parallel scan.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import hit, hits, measure_condition
from dpsql.rewrite.relation import filtered
from dpsql.rewrite.rows import ROWS, domain_filters, rows_select, subquery


def opaque(conditions: list[exp.Expression]) -> exp.Expression:
    """CASE WHEN a AND b THEN TRUE ELSE FALSE END: the same filter, in a form the optimizer
    does not push below the aggregation (it is meant for groups, not rows)."""
    cond = conditions[0]
    for c in conditions[1:]:
        cond = exp.And(this=cond, expression=c)
    return exp.Case(ifs=[exp.If(this=cond, true=exp.true())], default=exp.false())


def unique_unit(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if plan.bounded:
        return tree
    cond = hit(plan)
    keys = [exp.column(k.name) for k in plan.keys]
    cols = [key_text(i, k.copy()) for i, k in enumerate(keys)]
    cols += [exp.alias_(filtered(m.row_aggregate(d), measure_condition(plan, m)), m.name, copy=False)
             for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(filtered(exp.Count(this=exp.Star()), cond), "_units", copy=False))
    args: dict = {"expressions": cols,
                  "from_": exp.From(this=subquery(rows_select(plan, d, domain=False, fence=False), ROWS))}
    if keys:
        args["group"] = exp.Group(expressions=keys)
    sel = exp.Select(**args)
    keep = domain_filters(plan, names=True)
    if cond is not None and plan.keys and plan.selection is not None:
        keep.append(exp.GT(this=hits(plan), expression=exp.Literal.number(0)))
    elif keep and d.having_to_where:    # an aggregate keeps PostgreSQL from running it on every row
        keep.append(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)))
    if keep:
        sel.set("having", exp.Having(this=opaque(keep)))
    return sel
