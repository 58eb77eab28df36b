"""Bound each privacy unit's contribution, in the engine.

Following Wilson et al. (PoPETs 2020), the bounded rewrite has two levels:

1. per (unit, group): one row per unit and group key, holding the unit's measures
   clamped to max_rows_per_unit times the per-row bound (aggregates.per_unit_aggregate),
   and, when a unit could reach more groups than max_groups_per_unit, a rank
   ROW_NUMBER() OVER (PARTITION BY unit ORDER BY hash(unit, keys, salt));
2. per group: only rows with rank <= max_groups_per_unit are summed.

So one unit touches at most L0 = max_groups_per_unit groups and moves each by at most
Linf: the bounds dpsql.analysis.sensitivity turns into sensitivities. The choice of
groups depends only on the unit's own rows and a salt: a fresh 63-bit secret from the
OS CSPRNG for every query, passed as a bound parameter (never the engine's random(),
never anything the analyst can set or replay), so the analyst cannot predict or steer
which groups are kept.

When the engine guarantees the unit is unique (PRIMARY KEY or UNIQUE), each unit has
one row, in one group: the per-unit level is skipped and rows are only clipped.
Rows whose unit is NULL are dropped (a NULL unit identifies nobody, and UNIQUE
allows many NULLs).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.rewrite import aggregates, partitions

SALT = "salt"


def _salted_hash(unit: exp.Expression, keys: list[exp.Expression], dialect: str) -> exp.Expression:
    salt = exp.Placeholder(this=SALT)
    if dialect == "duckdb":
        return exp.Anonymous(this="hash", expressions=[unit, *keys, salt])
    if dialect == "postgres":
        parts = [exp.Cast(this=e, to=exp.DataType.build("TEXT")) for e in [unit, *keys]]
        text = exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string("\x1f"), *parts])
        return exp.Anonymous(this="hashtextextended", expressions=[text, salt])
    if dialect == "spark":
        return exp.Anonymous(this="xxhash64", expressions=[unit, *keys, salt])
    raise NotImplementedError(f"no salted hash for dialect {dialect}")


def base_filter(plan: QueryPlan) -> exp.Expression:
    """unit IS NOT NULL AND (analyst's WHERE) AND key IN (domain) ..."""
    conds: list[exp.Expression] = [exp.Not(this=exp.Is(this=exp.column(plan.table.privacy_unit), expression=exp.Null()))]
    if plan.where is not None:
        conds.append(exp.Paren(this=plan.where.copy()))
    conds.extend(partitions.domain_filter(plan))
    return exp.and_(*conds)


def _table(plan: QueryPlan) -> exp.Table:
    return exp.to_table(plan.table_ref)


def bounded(plan: QueryPlan, dialect: str) -> exp.Select:
    """The two-level rewrite with per-unit pre-aggregation."""
    unit = exp.column(plan.table.privacy_unit)
    key_cols = [exp.column(k.column) for k in plan.keys]
    rows = plan.table.max_rows_per_unit
    inner = exp.select(
        *[exp.alias_(c.copy(), k.name) for c, k in zip(key_cols, plan.keys)],
        *[exp.alias_(aggregates.per_unit_aggregate(m, rows), m.name) for m in plan.measures],
    ).from_(_table(plan)).where(base_filter(plan)).group_by(unit.copy(), *[c.copy() for c in key_cols])
    if plan.group_choice:
        rank = exp.Window(this=exp.RowNumber(), partition_by=[unit.copy()],
                          order=exp.Order(expressions=[exp.Ordered(this=_salted_hash(unit.copy(), [c.copy() for c in key_cols], dialect))]))
        inner = inner.select(exp.alias_(rank, "_rank"))
    outer = exp.select(
        *[exp.column(k.name) for k in plan.keys],
        *[exp.alias_(aggregates.total(m), m.name) for m in plan.measures],
        *partitions.units_column(plan),
    ).from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_per_unit"))))
    if plan.group_choice:
        outer = outer.where(exp.LTE(this=exp.column("_rank"), expression=exp.Literal.number(plan.table.max_groups_per_unit)))
    if plan.keys:
        outer = outer.group_by(*[exp.column(k.name) for k in plan.keys])
    return outer


def unique_unit(plan: QueryPlan, dialect: str) -> exp.Select:
    """One row per unit (engine-guaranteed): clip rows and aggregate per group."""
    key_cols = [exp.column(k.column) for k in plan.keys]
    sel = exp.select(
        *[exp.alias_(c, k.name) for c, k in zip(key_cols, plan.keys)],
        *[exp.alias_(aggregates.row_aggregate(m), m.name) for m in plan.measures],
        *partitions.units_column(plan),
    ).from_(_table(plan)).where(base_filter(plan))
    if plan.keys:
        sel = sel.group_by(*[exp.column(k.column) for k in plan.keys])
    return sel
