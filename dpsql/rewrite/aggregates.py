"""Measures as SQL aggregates: per unit (over rows) and per group (over units).

COUNT(*) and COUNT(col) count rows; SUM sums clamped exact integers; AVG was split by the
analysis into a centered SUM and a COUNT (avg = mid + sum/count, clamped), so here every
measure is a COUNT or a SUM. A centered sum is 2*SUM(v) - (lo+hi)*COUNT(v), in a wide integer
type so that no row count can overflow it; where the engine's SUM of BIGINT is cheap and widens
by itself (EngineDialect.narrow_sums: PostgreSQL), it is SUM(2v - (lo+hi)) of BIGINT terms, and
each unit's clamped contribution goes to the sum across units as a BIGINT, whenever the bounds
prove that every term fits.

The rows subquery (dpsql.rewrite.rows) holds each measure's input as `_x<i>`: the column for
counts and integer sums, the clamped, scaled, rounded BIGINT for other sums (computed once per
row); here it only gets its integer clamp, unless the analysis proved the cast lands in the
bounds by itself (Measure.cast_in_bounds: DOUBLE and PostgreSQL NUMERIC inputs with
|bound| * scale <= 2^50; the argument is dpsql.analysis.bind.cast_in_bounds).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import Measure
from dpsql.dialects import EngineDialect
from dpsql.rewrite.clip import clamp, row_bounds


def input_name(m: Measure) -> str:
    """The rows subquery's column holding the measure's input: _v3 reads _x3."""
    return "_x" + m.name[2:]


INT8_MAX = 2 ** 63 - 1


def fits_int8(*values: int) -> bool:
    return all(-INT8_MAX <= v <= INT8_MAX for v in values)


def _bigint(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=exp.DataType.build("BIGINT"))


def row_aggregate(m: Measure, d: EngineDialect) -> exp.Expression:
    """The aggregate over a unit's rows: COUNT(*), COUNT(x), SUM(v) or the centered sum."""
    if m.kind == "count":
        return exp.Count(this=exp.Star() if m.input is None else exp.column(input_name(m)))
    value = exp.column(input_name(m))
    if not m.cast_in_bounds:       # (the scaled cast of a DOUBLE lands in the bounds by itself:
        value = clamp(value, m.lo_int, m.hi_int)      # dpsql.analysis.bind.cast_in_bounds)
    c = m.lo_int + m.hi_int
    if (m.centered and not m.squared and d.narrow_sums
            and fits_int8(2 * m.lo_int - c, 2 * m.hi_int - c, m.lo_int, m.hi_int)):
        # SUM(2v - (lo + hi)) over the unit's non-NULL values is 2*SUM(v) - (lo+hi)*COUNT(v);
        # each term is a BIGINT in [lo - hi, hi - lo] (checked above to fit, with v itself), so
        # no row can overflow, and the engine's SUM widens (int8 -> 128-bit on PostgreSQL).
        term = exp.Sub(this=exp.Mul(this=_bigint(value), expression=exp.Literal.number(2)),
                       expression=exp.Literal.number(c) if c >= 0 else exp.Neg(this=exp.Literal.number(-c)))
        return exp.Sum(this=term)
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
    values, clamped again to [min(0, m*lo), max(0, m*hi)] (centered: m*[lo-hi, hi-lo]): a unit
    has from 1 to m rows in the group, so its sum lies anywhere between the one-row and the m-row
    extremes, and with a positive lo a unit with fewer than m rows sums below m*lo (the interval
    [m*lo, m*hi] would raise it: wrong answers on data bounding should leave alone). The interval
    contains 0 and has the same Linf as before (dpsql.analysis.sensitivity). Where a BIGINT sum wraps
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
    lo, hi = min(0, lo * rows_per_unit), max(0, hi * rows_per_unit)
    bounded = clamp(v, lo, hi)
    if d.cast_sum:
        bounded = exp.Cast(this=bounded, to=exp.DataType.build(d.wide_int, dialect=d.name))
    elif d.narrow_sums and fits_int8(lo, hi):
        # the clamped contribution is an integer in int8's range: the cast cannot fail, and the
        # SUM across units accumulates in the engine's cheap wide integer
        bounded = _bigint(bounded)
    return exp.Sum(this=bounded)
