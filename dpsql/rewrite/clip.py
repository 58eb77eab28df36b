"""Clamp values to their declared bounds, exactly.

Each summed row value is clamped to [lower, upper] in its own type, then brought to
an exact type: integers stay integers; anything else is cast to DECIMAL(18, s),
whose rounding is monotone, so the result lies within the bounds rounded outward to
10^-s (the bounds the sensitivity uses, see analysis.analyze._exact_bounds). The
engine then sums integers or decimals, which is exact: no floating-point
accumulation can push a sum past the bounds the clamps promise (Casacuberta,
Shoemate, Vadhan & Wagaman, CCS 2022). A clamp is total: LEAST/GREATEST cannot fail
on any row, and NULLs stay NULL (ignored by SUM and COUNT(col)).
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


def clamp(value: exp.Expression, lo: Fraction, hi: Fraction) -> exp.Expression:
    """CASE WHEN v < lo THEN lo WHEN v > hi THEN hi ELSE v END.

    Total (never fails) and NULL-preserving: LEAST/GREATEST would turn NULL into a
    bound, since DuckDB and PostgreSQL ignore NULL arguments there. NaN compares
    greater than every number in both engines, so it becomes hi.
    """
    return exp.Case(ifs=[exp.If(this=exp.LT(this=value, expression=number(lo)), true=number(lo)),
                         exp.If(this=exp.GT(this=value.copy(), expression=number(hi)), true=number(hi))],
                    default=value.copy())


def clipped_row_value(column: exp.Expression, m: Measure) -> exp.Expression:
    """One row's contribution to a sum measure, clamped and exact.

    Centered sums (AVG numerators) use 2*x - (lo + hi), an exact value in
    [lo - hi, hi - lo]; the released centered sum is the engine's sum over 2.
    """
    v = clamp(column, m.lo, m.hi)
    if m.sql_type != "int":
        v = exp.Cast(this=v, to=exp.DataType.build(m.sql_type))
    if m.centered:
        v = exp.Sub(this=exp.Mul(this=number(2), expression=v), expression=number(m.lo + m.hi))
    return v


def row_bounds(m: Measure) -> tuple[Fraction, Fraction]:
    """Bounds of one row's exact contribution (in the engine's units)."""
    if m.centered:
        return m.lo - m.hi, m.hi - m.lo
    return m.lo, m.hi
