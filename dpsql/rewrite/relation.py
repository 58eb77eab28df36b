"""The FROM clause of the rewrite: a Relation (dpsql.analysis.relation) as SQL.

    first AS a [INNER|LEFT] JOIN t AS b ON <checked equalities> ...          (as the analyst wrote)
      [JOIN linked_table AS _l1 ON a.link = _l1.key]                          (links dpsql resolves)
      [LEFT JOIN (per-unit flag of a semi-join) AS _s1 ON _s1._u = a.unit]   (semi-joins in WHERE)

A per-unit subquery is a derived table with one row per unit, each aggregate clamped to the
bounds the analysis derived (dpsql.analysis.per_unit.per_unit_instance), so the bounds hold whatever the
data: COUNT clamped to [0, R], SUM of exact clamped integers clamped to [R lo, R hi], AVG
and MIN/MAX of values clamped to [lo, hi]. Its WHERE, like a semi-join's, is evaluated per row
inside the aggregates (FILTER), never as a filter the engine could decide from statistics.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from sqlglot import exp

from dpsql.analysis.relation import PER_UNIT_HITS, Instance, PerUnit, Relation, SemiJoin
from dpsql.dialects import EngineDialect, data_type
from dpsql.rewrite.clip import clamp, number, scaled_value
from dpsql.rewrite.like import linear_like


def table(inst: Instance, d: EngineDialect) -> exp.Expression:
    """One FROM item under its alias. On Spark a source that names files (a path: it has a `/` or
    ends in .parquet) is one quoted identifier: the engine registers the files as a temporary
    view of that name (dpsql.engines.spark, the same test); DuckDB loads them into a table of
    that name in its files catalog (dpsql.engines.duckdb)."""
    alias = exp.TableAlias(this=exp.to_identifier(inst.alias))
    if inst.per_unit is not None:
        return exp.Subquery(this=per_unit_select(inst.per_unit, d), alias=alias)
    if d.path_sources and is_path(inst.ref):
        t = exp.Table(this=exp.to_identifier(inst.ref, quoted=True))
        if d.path_catalog:
            t.set("db", exp.to_identifier("main"))
            t.set("catalog", exp.to_identifier(d.path_catalog))
    else:
        t = _table_named(inst.ref).copy()
    t.set("alias", alias)
    return t


@lru_cache(maxsize=256)
def _table_named(ref: str) -> exp.Table:
    """exp.to_table(ref), parsed once per name: callers take a copy, never this tree itself."""
    return exp.to_table(ref)


def is_path(source: str) -> bool:
    return "/" in source or "\\" in source or source.lower().endswith(".parquet")


def from_clause(rel: Relation, d: EngineDialect) -> tuple[exp.From, list[exp.Join]]:
    joins = []
    for step in rel.joins:
        joins.append(exp.Join(this=table(step.instance, d), on=step.on.copy(),
                              **({"side": "LEFT"} if step.kind == "left" else {})))
    for s in rel.semi:
        joins.append(exp.Join(this=exp.Subquery(this=semi_select(s, d),
                                                alias=exp.TableAlias(this=exp.to_identifier(s.name))),
                              on=exp.EQ(this=exp.column("_u", table=s.name), expression=unit_column(rel, s.outer)),
                              side="LEFT"))
    return exp.From(this=table(rel.first, d)), joins


def unit_column(rel: Relation, ref: tuple[str, str] | None = None) -> exp.Column:
    alias, name = ref if ref is not None else rel.unit
    return exp.column(name, table=alias)


def not_null_unit(rel: Relation) -> exp.Expression | None:
    """unit IS NOT NULL, unless the engine guarantees it: a NULL unit identifies nobody, and
    UNIQUE allows many NULLs."""
    if rel.unit_not_null:
        return None
    return exp.Not(this=exp.Is(this=unit_column(rel), expression=exp.Null()))


def select(columns: list[exp.Expression], rel: Relation, d: EngineDialect, where: exp.Expression | None,
           group: list[exp.Expression]) -> exp.Select:
    src, joins = from_clause(rel, d)
    args: dict = {"expressions": columns, "from_": src}
    if joins:
        args["joins"] = joins
    if where is not None:
        args["where"] = exp.Where(this=where)
    if group:
        args["group"] = exp.Group(expressions=group)
    return exp.Select(**args)


def filtered(agg: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
    """agg FILTER (WHERE cond) for the aggregate, or for each aggregate inside an expression of
    aggregates (a centered sum); agg itself when there is no condition."""
    if cond is None:
        return agg

    def wrap(node: exp.Expression) -> exp.Expression:
        return exp.Filter(this=node, expression=exp.Where(this=cond.copy()))
    if isinstance(agg, (exp.AggFunc, exp.Anonymous)):
        return wrap(agg)
    for node in list(agg.find_all(exp.AggFunc)):
        if node.find_ancestor(exp.AggFunc) is None:
            node.replace(wrap(node.copy()))
    return agg


def semi_select(s: SemiJoin, d: EngineDialect) -> exp.Select:
    """SELECT unit AS _u, COUNT(*) FILTER (WHERE p) AS _in FROM relation WHERE unit IS NOT NULL
    GROUP BY unit: one row per unit with how many of its rows pass p. Correlated through a link
    key (s.inner), one row per key value instead: every row of a key belongs to the one unit of
    the outer row holding that key (dpsql.analysis.semijoin)."""
    rel = s.relation
    unit = unit_column(rel, s.inner)
    cols = [exp.alias_(unit.copy(), "_u", copy=False),
            exp.alias_(filtered(exp.Count(this=exp.Star()), _paren(s.where, d)), "_in", copy=False)]
    if s.inner is not None:
        return select(cols, _keyed(rel, s), d, None, [unit.copy()])
    return select(cols, rel, d, not_null_unit(rel), [unit.copy()])


def _keyed(rel: Relation, s: SemiJoin) -> Relation:
    """The inner relation of a semi-join correlated through a link key, without the joins dpsql
    added only to resolve the link to a unit (TPC-H Q4: lineitem JOIN orders inside EXISTS, the
    join the outer query makes again; SF 0.1 DuckDB 36 -> 27 ms) when nothing else reads them.

    The flags are the same: the rows are grouped by the key itself, and the outer query tests
    each key against one of its own rows of the link's target (s.outer), whose key is unique
    (links point to a unique key: dpsql.analysis.bind). A key with no target row, or whose
    target's unit is NULL, is one no outer row it could match survives: the outer relation keeps
    only rows whose unit is not NULL. So the unit (its NULL check included) is not needed here,
    and every row of a key still belongs to the one unit of the outer row holding it."""
    used = {s.inner[0]}
    for node in ([s.where] if s.where is not None else []) + [st.on for st in rel.joins if not st.instance.implicit]:
        used |= {c.table for c in node.find_all(exp.Column)}
    kept = tuple(st for st in rel.joins
                 if not (st.instance.implicit and st.kind == "inner" and st.instance.alias not in used))
    return rel if len(kept) == len(rel.joins) else replace(rel, joins=kept)


def per_unit_select(pu: PerUnit, d: EngineDialect) -> exp.Select:
    rel = pu.relation
    unit = unit_column(rel)
    cond = _paren(pu.where, d)
    R = pu.rows_per_unit
    cols: list[exp.Expression] = [exp.alias_(unit.copy(), pu.unit_name, copy=False)]
    for a in pu.aggregates:
        lo, hi = a.bounds
        if a.kind == "count":
            counted = exp.Count(this=exp.Star() if a.input is None else a.input.copy())
            value = exp.Least(this=filtered(counted, cond), expressions=[exp.Literal.number(R)], ignore_nulls=True)
        elif a.kind in ("sum", "avg"):
            total = filtered(exp.Sum(this=scaled_value(a.input.copy(), *a.row, a.scale, d)), cond)
            if a.kind == "sum":
                total = clamp(total, lo * a.scale, hi * a.scale)
                value = total if a.scale == 1 else exp.Div(       # typed: a plain `/` (see expressions)
                    this=exp.Cast(this=total, to=data_type("DOUBLE")), expression=number(a.scale),
                    typed=True)
            else:       # a quotient of two exact integers; NULLIF keeps a unit with no values total
                n = exp.Nullif(this=filtered(exp.Count(this=a.input.copy()), cond), expression=exp.Literal.number(0))
                value = exp.Div(this=exp.Cast(this=total, to=data_type("DOUBLE")),
                                expression=exp.Mul(this=n, expression=number(a.scale)), typed=True)
        else:
            agg = exp.Min if a.kind == "min" else exp.Max
            value = filtered(agg(this=clamp(a.input.copy(), *a.row)), cond)
        cols.append(exp.alias_(value, a.name, copy=False))
    if cond is not None:
        # Units with no row passing WHERE must not count, as SQL's WHERE would drop them; but not
        # by a HAVING: a derived table the analyst's WHERE empties would let the engine skip the
        # rest of the join (an empty hash-join build side, a dynamic min/max filter), and run time
        # would tell. Every unit keeps its row and the outer query's row flag tests PER_UNIT_HITS.
        cols.append(exp.alias_(filtered(exp.Count(this=exp.Star()), cond), PER_UNIT_HITS, copy=False))
    return select(cols, rel, d, not_null_unit(rel), [unit.copy()])


def condition(cond: exp.Expression, d: EngineDialect) -> exp.Expression:
    """A checked row condition for this engine: on engines whose LIKE backtracks, every LIKE
    becomes a linear RLIKE (dpsql.rewrite.like)."""
    if d.linear_like and cond.find(exp.Escape):
        return linear_like(cond.copy())
    return cond.copy()


def _paren(cond: exp.Expression | None, d: EngineDialect) -> exp.Expression | None:
    return None if cond is None else exp.Paren(this=condition(cond, d))
