"""Measures as SQL aggregates: per unit (over rows) and per group (over units).

COUNT(*) and COUNT(col) count rows; SUM sums clamped exact integers; AVG was split by the
analysis into a centered SUM and a COUNT (avg = mid + sum/count, clamped), so here every
measure is a COUNT or a SUM. A centered sum is 2*SUM(v) - (lo+hi)*COUNT(v), in a wide integer
type so that no row count can overflow it.

The rows subquery (dpsql.rewrite.rows) holds each measure's input as `_x<i>`: the column for
counts and integer sums, the clamped, scaled, rounded BIGINT for other sums (computed once per
row); here it only gets its integer clamp.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import Measure
from dpsql.dialects import EngineDialect
from dpsql.rewrite.clip import clamp, row_bounds


def input_name(m: Measure) -> str:
    """The rows subquery's column holding the measure's input: _v3 reads _x3."""
    return "_x" + m.name[2:]


def row_aggregate(m: Measure, d: EngineDialect) -> exp.Expression:
    """The aggregate over a unit's rows: COUNT(*), COUNT(x), SUM(v) or the centered sum."""
    if m.kind == "count":
        return exp.Count(this=exp.Star() if m.input is None else exp.column(input_name(m)))
    value = clamp(exp.column(input_name(m)), m.lo_int, m.hi_int)
    if m.squared:           # (2x - (lo + hi))^2 in the wide type: at most (hi - lo)^2 <= 4e34 < 1e38
        t = exp.Sub(this=exp.Mul(this=d.wide(2), expression=exp.Cast(this=value, to=exp.DataType.build(
            d.wide_int, dialect=d.name))), expression=d.wide(m.lo_int + m.hi_int))
        return exp.Sum(this=exp.Mul(this=exp.Paren(this=t), expression=exp.Paren(this=t.copy())))
    total = exp.Sum(this=value)
    if not m.centered:
        return total
    offset = exp.Mul(this=d.wide(m.lo_int + m.hi_int), expression=exp.Count(this=exp.column(input_name(m))))
    return exp.Sub(this=exp.Mul(this=d.wide(2), expression=total), expression=offset)


def bounded_total(m: Measure, rows_per_unit: int, d: EngineDialect) -> exp.Expression:
    """Sum over units of each unit's contribution, clamped to max_rows_per_unit times the row bound.

    count: LEAST(count, m), so each unit adds at most m; sum: the unit's sum of clamped exact row
    values, clamped again to [m*lo, m*hi] (centered: m*[lo-hi, hi-lo]). Where a BIGINT sum wraps
    around on overflow (Spark: a sum across many units could, and one unit more would then move
    it by ~2**64), the clamped values are summed in the wide type (EngineDialect.cast_sum). A
    unit's own sum may still wrap there; the clamp bounds it anyway.
    """
    v = exp.column(m.name)
    if m.kind == "count":
        # a count is never NULL, so LEAST's NULL handling does not matter here
        cap = m.cap if m.cap is not None else rows_per_unit
        return exp.Sum(this=exp.Least(this=v, expressions=[exp.Literal.number(cap)], ignore_nulls=True))
    lo, hi = row_bounds(m)
    bounded = clamp(v, lo * rows_per_unit, hi * rows_per_unit)
    if d.cast_sum:
        bounded = exp.Cast(this=bounded, to=exp.DataType.build(d.wide_int, dialect=d.name))
    return exp.Sum(this=bounded)
