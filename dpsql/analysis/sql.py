"""Small SQL builders the analysis and the rewrite share: exact numeric literals, clamps, and
conditions split into (conjuncts) and joined from (and_all) their ANDed parts."""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from sqlglot import exp


def number(value: Fraction | float) -> exp.Literal | exp.Neg:
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


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The parts of a condition joined by AND (parentheses around them dropped)."""
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def and_all(conds: list[exp.Expression]) -> exp.Expression:
    """The conditions joined by AND, an OR among them parenthesised."""
    out = conds[0]
    for c in conds[1:]:
        out = exp.And(this=exp.Paren(this=out) if isinstance(out, exp.Or) else out,
                      expression=exp.Paren(this=c) if isinstance(c, exp.Or) else c)
    return out
