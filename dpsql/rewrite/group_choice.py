"""Pass 3, group_choice: rank each unit's groups by a salted hash, when a unit could reach more
groups than max_groups_per_unit allows (plan.group_choice).

    ..., ROW_NUMBER() OVER (PARTITION BY _u ORDER BY [CASE WHEN <hits> > 0 THEN 0 ELSE 1 END,]
                            hash(_u, _g0, ..., salt)) AS _rank

The totals pass keeps rank <= L0. The choice depends only on the unit's own rows and a salt: a
fresh 63-bit secret from the OS CSPRNG for every query, passed as a bound parameter (never the
engine's random(), never anything the analyst can set or replay), so the analyst can neither
predict nor steer which groups are kept. With a WHERE, groups with passing rows rank first, so
among them the rank is exactly the one the filtered rows would give.

Only units with more than L0 groups need a rank (every group of the others is kept, rank or
not), and the window's sort is most of a multi-group query's time (TPC-H Q7 at SF 0.1: 250 of
300 ms, over 471,038 (unit, group) rows, none of whose units has more than L0 groups). Where the
engine computes a CTE read twice only once (dialect split_group_choice: DuckDB, and PostgreSQL
from an L0 of split_min_l0), the per-unit rows are split by their unit's group count:

    WITH _p AS (<per unit>), _many AS (SELECT _u FROM _p GROUP BY _u HAVING COUNT(*) > L0)
    SELECT _p.*, 1 AS _rank FROM _p LEFT JOIN _many ON _many._u = _p._u WHERE _many._u IS NULL
    UNION ALL
    SELECT _p.*, ROW_NUMBER() OVER (<as above>) AS _rank FROM _p WHERE _u IN (SELECT _u FROM _many)

Same rows kept, same sums: a unit with at most L0 groups keeps all of them either way, and a unit
with more is ranked over exactly its own groups, as before. _u is never NULL here (the rows pass
keeps only non-NULL units), so the join on it loses no row. Timing: which units are ranked depends
on the policy-filtered rows only (their group counts), never on the analyst's WHERE, which is still
evaluated per row inside FILTER (dpsql.rewrite.per_unit): the split changes the work by the number
of groups of units above L0, the same for every WHERE.
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


def _rank(plan: QueryPlan, d: EngineDialect, hits_now: exp.Expression | None) -> exp.Expression:
    """ROW_NUMBER() OVER (PARTITION BY _u ORDER BY [groups with hits first,] salted hash, keys)."""
    # The keys after the hash: a tie (two of a unit's groups hashing alike) is broken by the
    # unit's own values, never by the order other units' rows arrive in.
    order = [exp.Ordered(this=unit_keys_hash(plan, d)),
             *[exp.Ordered(this=exp.column(k.name)) for k in plan.keys]]
    if hits_now is not None:
        first = exp.Case(ifs=[exp.If(this=exp.GT(this=hits_now, expression=exp.Literal.number(0)),
                                     true=exp.Literal.number(0))], default=exp.Literal.number(1))
        order.insert(0, exp.Ordered(this=first))
    return exp.Window(this=exp.RowNumber(), partition_by=[exp.column("_u")], order=exp.Order(expressions=order))


def group_choice(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select | exp.Union:
    if not plan.group_choice:
        return tree
    if not d.split_group_choice or plan.l0 < d.split_min_l0:
        tree.append("expressions", exp.alias_(_rank(plan, d, hits(plan)), "_rank", copy=False))
        return tree
    return _split(tree, plan, d)


def _split(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Union:
    """The per-unit rows, ranked only where the unit has more than L0 groups (the docstring)."""
    p, many = "_p", "_many"
    on = exp.EQ(this=exp.column("_u", table=many), expression=exp.column("_u", table=p))
    star = exp.Column(this=exp.Star(), table=exp.to_identifier(p))
    counted = exp.Select(expressions=[exp.column("_u")], from_=exp.From(this=exp.to_table(p)),
                         group=exp.Group(expressions=[exp.column("_u")]),
                         having=exp.Having(this=exp.GT(this=exp.Count(this=exp.Star()),
                                                       expression=exp.Literal.number(plan.l0))))
    few = exp.Select(expressions=[star.copy(), exp.alias_(exp.Literal.number(1), "_rank", copy=False)],
                     from_=exp.From(this=exp.to_table(p)),
                     joins=[exp.Join(this=exp.to_table(many), on=on.copy(), side="LEFT")],
                     where=exp.Where(this=exp.Is(this=exp.column("_u", table=many), expression=exp.Null())))
    hits_now = None if plan.where is None else exp.column("_hits", table=p)
    chosen = exp.In(this=exp.column("_u"), query=exp.Subquery(this=exp.Select(
        expressions=[exp.column("_u")], from_=exp.From(this=exp.to_table(many)))))
    ranked = exp.Select(expressions=[star.copy(), exp.alias_(_rank(plan, d, hits_now), "_rank", copy=False)],
                        from_=exp.From(this=exp.to_table(p)), where=exp.Where(this=chosen))
    union = exp.Union(this=few, expression=ranked, distinct=False)
    union.set("with_", exp.With(expressions=[
        exp.CTE(this=tree, alias=exp.TableAlias(this=exp.to_identifier(p))),
        exp.CTE(this=counted, alias=exp.TableAlias(this=exp.to_identifier(many)))]))
    return union
