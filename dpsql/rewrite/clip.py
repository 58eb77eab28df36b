"""Clamp values to their declared bounds, exactly.

Each summed row value is clamped to [lower, upper] and held as an exact integer:
integers stay integers; anything else becomes round(x * 10^s) as a BIGINT, clamped
again to the bounds rounded outward to 10^-s (the bounds the sensitivity uses, see
analysis.bind.exact_bounds) -- except where analysis.bind.cast_in_bounds proves the
rounded value already lies in them (DOUBLE and PostgreSQL NUMERIC inputs, bounds * 10^s
within 2^50: Measure.cast_in_bounds; the per-unit sums read it, analysis.measures). The engine then sums integers, which is exact: no
floating-point accumulation can push a sum past the bounds the clamps promise
(Casacuberta, Shoemate, Vadhan & Wagaman, CCS 2022). A clamp is total (a CASE cannot
fail on any row), and NULLs stay NULL (ignored by SUM and COUNT(col)).
"""
from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.sql import clamp, number
from dpsql.dialects import EngineDialect, data_type

__all__ = ["clamp", "number", "scaled_cast", "scaled_value"]


def scaled_value(value: exp.Expression, lo: Fraction, hi: Fraction, scale: int,
                 d: EngineDialect) -> exp.Expression:
    """One row's value as an exact integer in [lo*scale, hi*scale] (NULL stays NULL).

    Integer columns with whole bounds (scale 1): the clamped value itself. Otherwise: clamp in
    the column's own type (so the cast below cannot overflow), multiply by the scale, cast to
    BIGINT (rounding), and clamp again in integers, since the engine's rounding of a large
    double need not be exact: the integer bounds hold whatever it does.
    """
    if scale == 1:
        return clamp(value, lo, hi)
    return clamp(scaled_cast(value, lo, hi, scale, d), lo * scale, hi * scale)


def scaled_cast(value: exp.Expression, lo: Fraction, hi: Fraction, scale: int, d: EngineDialect) -> exp.Expression:
    """The first steps of scaled_value for a non-integer value: clamp in the column's type,
    scale, round to BIGINT. Its result still needs the integer clamp."""
    v = clamp(value, lo, hi)
    v = exp.Mul(this=v, expression=exp.Literal.number(scale))
    if d.round_before_bigint:       # Spark's CAST truncates; ROUND rounds half away from zero, as DuckDB's CAST
        v = exp.Round(this=v)
    return exp.Cast(this=v, to=data_type("BIGINT"))

