"""Clamp values to their declared bounds, exactly.

Each summed row value is clamped to [lower, upper] and held as an exact integer:
integers stay integers; anything else becomes round(x * 10^s) as a BIGINT, clamped
again to the bounds rounded outward to 10^-s (the bounds the sensitivity uses, see
analysis.analyze._exact_bounds). The engine then sums integers, which is exact: no
floating-point accumulation can push a sum past the bounds the clamps promise
(Casacuberta, Shoemate, Vadhan & Wagaman, CCS 2022). A clamp is total (a CASE cannot
fail on any row), and NULLs stay NULL (ignored by SUM and COUNT(col)).
"""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.plan import Measure


def number(value: Fraction | int | float) -> exp.Literal | exp.Neg:
    """An exact SQL numeric literal (bounds are on a 10^-s grid, so this terminates)."""
    text = _decimal_text(Fraction(value))
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal.number(text[1:]))
    return exp.Literal.number(text)


def _decimal_text(fr: Fraction) -> str:
    num, den = fr.numerator, fr.denominator
    scale = 0
    while den != 1:
        if scale > 40:
            raise ValueError("bound is not a terminating decimal")
        num *= 10
        scale += 1
        if num % den == 0:
            num //= den
            den = 1
    d = Decimal(num).scaleb(-scale)
    return format(d, "f")


def clamp(value: exp.Expression, lo: Fraction | int, hi: Fraction | int) -> exp.Expression:
    """CASE WHEN v < lo THEN lo WHEN v > hi THEN hi ELSE v END.

    Total (never fails) and NULL-preserving: LEAST/GREATEST would turn NULL into a
    bound, since DuckDB and PostgreSQL ignore NULL arguments there. NaN compares
    greater than every number in both engines, so it becomes hi.
    """
    return exp.Case(ifs=[exp.If(this=exp.LT(this=value, expression=number(lo)), true=number(lo)),
                         exp.If(this=exp.GT(this=value.copy(), expression=number(hi)), true=number(hi))],
                    default=value.copy())


def scaled_row_value(column: exp.Expression, m: Measure, dialect: str = "duckdb") -> exp.Expression:
    """One row's value as an exact integer in [lo*scale, hi*scale] (NULL stays NULL).

    Integer columns with whole bounds: the clamped value itself. Otherwise: clamp in the
    column's own type (so the cast below cannot overflow), multiply by the scale, cast
    to BIGINT (rounding), and clamp again in integers, since the engine's rounding of a
    large double need not be exact: the integer bounds hold whatever it does.
    """
    if m.scale == 1:
        return clamp(column, m.lo_int, m.hi_int)
    return clamp(scaled_cast(column, m, dialect), m.lo_int, m.hi_int)


def scaled_cast(column: exp.Expression, m: Measure, dialect: str = "duckdb") -> exp.Expression:
    """The first steps of scaled_row_value for a non-integer value: clamp in the column's type,
    scale, round to BIGINT. Its result still needs the integer clamp."""
    v = clamp(column, m.lo, m.hi)
    v = exp.Mul(this=v, expression=exp.Literal.number(m.scale))
    if dialect == "spark":       # Spark's CAST truncates; ROUND rounds half away from zero, as DuckDB's CAST
        v = exp.Round(this=v)
    return exp.Cast(this=v, to=exp.DataType.build("BIGINT"))


def row_bounds(m: Measure) -> tuple[int, int]:
    """Bounds of one row's contribution to a sum measure, in the engine's integers."""
    if m.centered:
        return m.lo_int - m.hi_int, m.hi_int - m.lo_int
    return m.lo_int, m.hi_int
