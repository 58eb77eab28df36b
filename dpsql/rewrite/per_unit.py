"""Pass 2, per_unit: one row per (unit, group), each measure aggregated over the unit's rows.

    SELECT _u, _g0, agg(_x0) FILTER (WHERE _h) AS _v0, ..., COUNT(*) FILTER (WHERE _h) AS _hits
    FROM (<rows>) AS _rows GROUP BY _u, _g0

User-level bounding (Wilson, Zhang, Lam, Desfontaines, Simmons-Marengo & Gipson, PoPETs 2020)
has two levels; this is the first: each unit's rows in a group become one row, whose measures
the next passes clamp (totals) after choosing at most L0 groups per unit (group_choice). With a
WHERE, every (unit, group) of the policy-filtered rows is formed and _hits counts its rows that
pass; groups without a passing row are dropped later, so the bounds are those of the filtered
query. It reads the joined relation after every join: fan-out cannot raise sensitivity.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite.relation import filtered
from dpsql.rewrite.rows import ROWS, filters, subquery

PER_UNIT = "_per_unit"


def hit(plan: QueryPlan) -> exp.Expression | None:
    """The per-row flag of the analyst's WHERE, or None without one."""
    return None if plan.where is None else exp.column("_h")


def hits(plan: QueryPlan) -> exp.Expression | None:
    cond = hit(plan)
    return None if cond is None else filtered(exp.Count(this=exp.Star()), cond)


def measure_condition(plan: QueryPlan, m) -> exp.Expression | None:
    """The rows a measure aggregates: those passing WHERE (_h) and its own FILTER (_f<j>)."""
    cond = hit(plan)
    if m.filter is not None:
        flag = exp.column(filters(plan)[m.filter.sql("postgres")][0])
        cond = flag if cond is None else exp.And(this=cond, expression=flag)
    return cond


def per_unit(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    cond = hit(plan)
    keys = [exp.column(k.name) for k in plan.keys]
    cols: list[exp.Expression] = [exp.column("_u"), *[k.copy() for k in keys]]
    cols += [exp.alias_(filtered(m.row_aggregate(d), measure_condition(plan, m)), m.name, copy=False)
             for m in plan.measures]
    if cond is not None:
        cols.append(exp.alias_(hits(plan), "_hits", copy=False))
    return exp.Select(expressions=cols, from_=exp.From(this=subquery(tree, ROWS)),
                      group=exp.Group(expressions=[exp.column("_u"), *keys]))
