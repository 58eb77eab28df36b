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


def per_unit_aggregate(m: Measure) -> exp.Expression:
    """One unit's raw aggregate in one group (the inner level of the bounded rewrite)."""
    return row_aggregate(m)


def bounded_total(m: Measure, rows_per_unit: int) -> exp.Expression:
    """Sum over units of each unit's contribution, clamped to max_rows_per_unit times the row bound.

    count: LEAST(count, m), so each unit adds at most m; sum: the unit's sum of clamped
    exact row values, clamped again to [m*lo, m*hi].
    """
    v = exp.column(m.name)
    if m.kind == "count":
        # a count is never NULL, so LEAST's NULL handling does not matter here
        return exp.Sum(this=exp.Least(this=v, expressions=[exp.Literal.number(rows_per_unit)], ignore_nulls=True))
    lo, hi = row_bounds(m)
    return exp.Sum(this=clamp(v, lo * rows_per_unit, hi * rows_per_unit))


def total(m: Measure) -> exp.Expression:
    """Sum of the rows' contributions in a group (one row per unit: the PK shortcut)."""
    return row_aggregate(m)
