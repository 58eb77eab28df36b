"""Measures as SQL aggregates: per unit (bounded path) and per group.

COUNT(*) and COUNT(col) count rows; SUM sums clamped exact integers; AVG was split by
the analysis into a centered SUM and a COUNT (avg = mid + sum/count, clamped), so here
every measure is a COUNT or a SUM. A centered sum is 2*SUM(v) - (lo+hi)*COUNT(v), in
a wide integer type so that no row count can overflow it.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import Measure
from dpsql.rewrite.clip import clamp, row_bounds, scaled_row_value

_WIDE = {"duckdb": "HUGEINT", "postgres": "NUMERIC", "spark": "DECIMAL(38, 0)"}


def wide(value: int, dialect: str) -> exp.Expression:
    """An integer literal in the engine's widest exact integer type."""
    return exp.Cast(this=exp.Literal.number(value), to=exp.DataType.build(_WIDE[dialect], dialect=dialect))


def row_aggregate(m: Measure, dialect: str, scaled: str | None = None) -> exp.Expression:
    """The aggregate over raw rows: COUNT(*), COUNT(col), SUM(v) or the centered sum.

    scaled: the name of a column already holding scaled_cast(m.column) (the PostgreSQL rows
    subquery), so only the integer clamp is left to do here."""
    if m.kind == "count":
        return exp.Count(this=exp.Star() if m.column is None else exp.column(m.column))
    if scaled is not None:
        value = clamp(exp.column(scaled), m.lo_int, m.hi_int)
    else:
        value = scaled_row_value(exp.column(m.column), m, dialect)
    total = exp.Sum(this=value)
    if not m.centered:
        return total
    offset = exp.Mul(this=wide(m.lo_int + m.hi_int, dialect), expression=exp.Count(this=exp.column(m.column)))
    return exp.Sub(this=exp.Mul(this=wide(2, dialect), expression=total), expression=offset)


def bounded_total(m: Measure, rows_per_unit: int, dialect: str = "duckdb") -> exp.Expression:
    """Sum over units of each unit's contribution, clamped to max_rows_per_unit times the row bound.

    count: LEAST(count, m), so each unit adds at most m; sum: the unit's sum of clamped
    exact row values, clamped again to [m*lo, m*hi] (centered: m*[lo-hi, hi-lo]).
    On Spark, SUM of BIGINT is a BIGINT that wraps around on overflow (a sum across many
    units could, and one unit more would then move it by ~2**64), so the clamped values are
    summed as DECIMAL(38, 0). A unit's own sum may still wrap; the clamp bounds it anyway.
    """
    v = exp.column(m.name)
    if m.kind == "count":
        # a count is never NULL, so LEAST's NULL handling does not matter here
        return exp.Sum(this=exp.Least(this=v, expressions=[exp.Literal.number(rows_per_unit)], ignore_nulls=True))
    lo, hi = row_bounds(m)
    bounded = clamp(v, lo * rows_per_unit, hi * rows_per_unit)
    if dialect == "spark":
        bounded = exp.Cast(this=bounded, to=exp.DataType.build(_WIDE[dialect], dialect=dialect))
    return exp.Sum(this=bounded)
