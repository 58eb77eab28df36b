"""Pass 1, rows: the joined relation's rows, policy-filtered, as flat named columns.

    SELECT <unit> AS _u, <key> AS _g0, ..., <measure input> AS _x0, ..., (<WHERE>) AS _h
    FROM <relation> WHERE <unit> IS NOT NULL AND <key> IN (<public domain>) ...

Everything after reads these names only, whatever the FROM clause was (one table, joins, links,
per-unit subqueries, semi-join flags). The filters here come from the policy, never from the
analyst: the analyst's WHERE is the per-row flag `_h`, evaluated inside the aggregates
(`FILTER (WHERE _h)`), so the engine cannot skip work on it by its statistics (zone maps,
DuckDB's statistics propagation, PostgreSQL's index choice, Spark's Parquet pruning): each of
those would make run time answer a question about the data. A sum's input is the clamped,
scaled, rounded BIGINT (dpsql.rewrite.clip.scaled_cast), computed once per row that passes the
WHERE (passing_only); on engines
that do not share common subexpressions the subquery is fenced (EngineDialect.fence_rows) when a
later pass reads that value more than once (its integer clamp, or a square): a sum whose cast
lands in its bounds by itself (Measure.cast_in_bounds) reads it once, and the planner keeps its
freedom (on PostgreSQL a sorted, parallel per-unit aggregation instead of a spilling hash).

Example (visits, SUM(cost) WHERE kind = 'lab' GROUP BY state):
    SELECT visits.person_id AS _u, visits.state AS _g0,
           CAST(CASE WHEN visits.cost < 0 ... END * 1000000 AS BIGINT) AS _x0,
           (visits.kind = 'lab') AS _h
    FROM visits AS visits
    WHERE NOT visits.person_id IS NULL AND visits.state IN ('CA', ...)
"""
from __future__ import annotations

import datetime as _dt

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect, data_type
from dpsql.rewrite import relation as fr
from dpsql.rewrite.clip import number, scaled_cast

ROWS = "_rows"


def rows_select(plan: QueryPlan, d: EngineDialect, *, domain: bool = True, fence: bool = True) -> exp.Select:
    rel = plan.relation
    cols: list[exp.Expression] = [exp.alias_(fr.unit_column(rel), "_u", copy=False)]
    cols += [exp.alias_(k.expr.copy(), k.name, copy=False) for k in plan.keys]
    scaled = False
    where = None if plan.where is None else fr.condition(plan.where, d)
    inputs = sum(1 for m in plan.measures if m.input is not None)
    only_passing = where is not None and inputs <= PASSING_ONLY_INPUTS
    for m in plan.measures:
        if m.input is None:
            continue
        value = m.input.copy()
        if m.scaled_input and m.scale != 1:
            value = scaled_cast(value, m.lo, m.hi, m.scale, d)
            # read more than once later (the integer clamp, a square): compute it once, fenced
            scaled = scaled or m.rereads_input
        if only_passing:
            value = passing_only(value, where)
        cols.append(exp.alias_(value, m.input_name, copy=False))
    if where is not None:
        cols.append(exp.alias_(exp.Paren(this=where), "_h", copy=False))
    for text, (name, cond) in filters(plan).items():
        cols.append(exp.alias_(exp.Paren(this=fr.condition(cond, d)), name, copy=False))
    conds = [c for c in (fr.not_null_unit(rel),) if c is not None]
    if domain:
        conds += domain_filters(plan)
    rows_mode = plan.where_rows and d.row_fence is not None
    if rows_mode and d.row_fence == "volatile":
        conds.append(fenced(where))
    sel = fr.select(cols, rel, d, _and(conds), [])
    if fence and scaled and d.fence_rows:
        sel.set("offset", exp.Offset(expression=exp.Literal.number(0)))
    return sel


def fenced(where: exp.Expression) -> exp.Expression:
    """[timing] where = "rows" on DuckDB: the analyst's WHERE as a row filter the optimizer can
    neither push into a scan (zone maps, the scan's table filters) nor fold from its statistics:
    CASE WHEN random() >= 0 THEN (<WHERE>) END is true exactly where the WHERE is (random() is in
    [0, 1)), but it is volatile, so DuckDB evaluates it per row, above the scans and joins, and its
    statistics propagation cannot decide it. PostgreSQL's fence is OFFSET 0 (EngineDialect.row_fence):
    no qual is pushed into a subquery with an OFFSET, so no index can answer it either.

    The privacy argument (docs/PRIVACY.md, run time; the policy's Timing): every row is still read
    and its WHERE evaluated, so run time never answers a question through the engine's
    statistics; what grows with the passing rows is the per-unit aggregation's work, about a
    microsecond per row, which the release floor (required: dpsql.policy) hides for every query
    that finishes before it. The answers are the same as under "aggregate": every aggregate
    still reads FILTER (WHERE _h), and the groups without a passing row, which that mode forms
    and then drops, are simply never formed (the group choice ranks a unit's passing groups first
    there, so the kept groups are the same)."""
    random_ = exp.GTE(this=exp.Anonymous(this="random", expressions=[]), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=random_, true=exp.Paren(this=where.copy()))])


PASSING_ONLY_INPUTS = 2


def passing_only(value: exp.Expression, where: exp.Expression) -> exp.Expression:
    """CASE WHEN (<WHERE>) THEN value END: a measure's input, clamped and scaled only on the rows
    that pass the WHERE (the engine evaluates a CASE branch only for the rows that take it: TPC-H
    Q6 at SF 0.1 on DuckDB 35 -> 26 ms, on PostgreSQL 253 -> 220 ms; Q14 35 -> 24 ms, Q12 35 ->
    30 ms). Each CASE evaluates the WHERE again (neither engine shares it between columns), so
    only for queries of at most PASSING_ONLY_INPUTS measure inputs: Q1's ten, behind a WHERE
    that 98% of the rows pass, took 60 -> 120 ms. The choice is the query's alone, never the
    data's (a plan chosen by the data's statistics would be a timing channel). The same sums: every
    aggregate of the input is FILTER (WHERE _h), which leaves out the rows this makes NULL. Timing:
    every row is still read and its WHERE evaluated, in an expression no statistics can skip; the
    clamp's nanoseconds on a passing row join the per-row work that already differs with the
    data (the FILTERed aggregates themselves), the residual the release timing hides."""
    return exp.Case(ifs=[exp.If(this=exp.Paren(this=where.copy()), true=value)])


def filters(plan: QueryPlan) -> dict[str, tuple[str, exp.Expression]]:
    """The aggregates' own FILTER (WHERE ...) conditions, each once: SQL text -> (_f<j>, condition).
    Like WHERE, each is a per-row flag evaluated inside the aggregates."""
    out: dict[str, tuple[str, exp.Expression]] = {}
    for m in plan.measures:
        if m.filter is not None:
            text = m.filter.sql("postgres")
            if text not in out:
                out[text] = (f"_f{len(out)}", m.filter)
    return out


def domain_filters(plan: QueryPlan, *, names: bool = False) -> list[exp.Expression]:
    """`key IN (domain)` for each key with a domain declared in the policy (a public table's
    values need none: every row's key comes from that table; nor does an expression's derived
    domain, which holds every value the expression can take but NULL, and a NULL key is never
    released from a domain without it). names: on the _g column."""
    out = []
    for k in plan.keys:
        if k.domain is not None and k.domain_source is None and k.derived is None:
            items = [exp.Literal.string(v) if isinstance(v, str) else exp.Boolean(this=v) if isinstance(v, bool)
                     else exp.Cast(this=exp.Literal.string(v.isoformat()), to=data_type("DATE"))
                     if isinstance(v, _dt.date) else number(v) for v in k.domain if v is not None]
            out.append(exp.In(this=exp.column(k.name) if names else k.expr.copy(), expressions=items))
    return out


def subquery(sel: exp.Select, alias: str) -> exp.Subquery:
    return exp.Subquery(this=sel, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _and(conds: list[exp.Expression]) -> exp.Expression | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = exp.And(this=out, expression=c)
    return out


def rows(tree: exp.Select | None, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    """The first pass: the rows subquery (tree is None). Under [timing] where = "rows" on an
    engine fenced by OFFSET 0 (PostgreSQL), SELECT * FROM (<rows> OFFSET 0) AS _all WHERE _h;
    the passes that extend the rows select with columns of their own (distinct counts,
    quantiles, the shortcuts) keep the default placement there."""
    sel = rows_select(plan, d)
    if plan.where_rows and d.row_fence == "offset":
        sel.set("offset", exp.Offset(expression=exp.Literal.number(0)))
        return exp.Select(expressions=[exp.Star()], from_=exp.From(this=subquery(sel, "_all")),
                          where=exp.Where(this=exp.column("_h")))
    return sel
