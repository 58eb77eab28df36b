"""Measures as SQL aggregates: per unit (bounded path) and per group.

COUNT(*) and COUNT(col) count rows; SUM sums clamped exact values; AVG was split by
the analysis into a centered SUM and a COUNT (avg = mid + sum/count, clamped), so
here every measure is a COUNT or a SUM.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import Measure
from dpsql.rewrite.clip import clamp, clipped_row_value, row_bounds


def row_aggregate(m: Measure) -> exp.Expression:
    """The aggregate over raw rows: COUNT(*), COUNT(col) or SUM(clamped col)."""
    if m.kind == "count":
        return exp.Count(this=exp.Star() if m.column is None else exp.column(m.column))
    return exp.Sum(this=clipped_row_value(exp.column(m.column), m))


def per_unit_aggregate(m: Measure, rows_per_unit: int) -> exp.Expression:
    """One unit's contribution to one group, clamped to max_rows_per_unit times the row bound."""
    agg = row_aggregate(m)
    if m.kind == "count":
        return exp.Least(this=agg, expressions=[exp.Literal.number(rows_per_unit)])
    lo, hi = row_bounds(m)
    return clamp(agg, lo * rows_per_unit, hi * rows_per_unit)


def total(m: Measure) -> exp.Expression:
    """Sum of the per-unit contributions in a group."""
    return exp.Sum(this=exp.column(m.name))
