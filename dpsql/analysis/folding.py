"""Constant arithmetic in the query text, folded at analysis time to the literal it makes: date
arithmetic (fold_dates, shift_date) and numeric arithmetic in conditions (fold_numbers).
"""
from __future__ import annotations

import datetime as _dt
import re
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.literals import DATE_TEXT, NUMBER
from dpsql.dialects import data_type
from dpsql.errors import QueryRejected

_INTERVAL_PART = re.compile(r"\s*([+-]?\d{1,6})\s*(years?|months?|mons?|weeks?|days?)\s*", re.IGNORECASE)
_QUALIFIER_UNITS = {"YEAR": (12, 0), "MONTH": (1, 0), "DAY": (0, 1)}     # PostgreSQL's interval qualifiers
_TEXT_UNITS = {"year": (12, 0), "mon": (1, 0), "month": (1, 0), "week": (0, 7), "day": (0, 1)}
ACCEPTED_DATE_ARITHMETIC = ("DATE 'YYYY-MM-DD' + INTERVAL 'n' DAY (or MONTH, YEAR, or INTERVAL 'n days', "
                            "'n months', 'n years', 'n weeks'), or DATE 'YYYY-MM-DD' + n (days)")


def _interval(node: exp.Interval) -> tuple[int, int] | None:
    """(months, days) of a constant interval of whole days, weeks, months and years; None otherwise
    (a time of day, a bare number, which PostgreSQL reads as seconds, or any other unit)."""
    value, unit = node.this, node.args.get("unit")
    if not (isinstance(value, exp.Literal) and value.is_string):
        return None
    if unit is None:
        text, months, days, pos = value.this, 0, 0, 0
        while pos < len(text):
            m = _INTERVAL_PART.match(text, pos)
            if m is None or m.end() == pos:
                return None
            k = _TEXT_UNITS[m.group(2).lower().rstrip("s")]
            months, days, pos = months + int(m.group(1)) * k[0], days + int(m.group(1)) * k[1], m.end()
        return (months, days) if text.strip() else None
    if not isinstance(unit, exp.Var) or not re.fullmatch(r"\s*[+-]?\d{1,6}\s*", value.this):
        return None
    name = unit.name.upper()
    n = int(value.this)
    if name in _QUALIFIER_UNITS:
        k = _QUALIFIER_UNITS[name]
    elif name.lower().rstrip("s") in _TEXT_UNITS and name.lower() != "mon":  # '3 months': sqlglot splits the text
        k = _TEXT_UNITS[name.lower().rstrip("s")]
    else:
        return None
    return n * k[0], n * k[1]


def _date_constant(node: exp.Expression) -> _dt.date | None:
    """DATE 'YYYY-MM-DD' or CAST('YYYY-MM-DD' AS DATE): a real calendar date."""
    if (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.this == exp.DataType.Type.DATE and DATE_TEXT.fullmatch(node.this.this)):
        try:
            return _dt.date.fromisoformat(node.this.this)
        except ValueError:
            return None
    return None


def shift_date(day: _dt.date, months: int, days: int) -> _dt.date:
    """PostgreSQL's date + interval (timestamp + interval, at midnight): the months first, the day
    of month clamped to the last day of the month reached (Jan 31 + 1 month = Feb 28 or 29), then
    the days. OverflowError outside years 1-9999."""
    total = day.year * 12 + (day.month - 1) + months
    year, month = divmod(total, 12)
    if not 1 <= year <= 9999:
        raise OverflowError(year)
    last = (_dt.date(year + (month == 11), (month + 1) % 12 + 1, 1) - _dt.timedelta(days=1)).day
    return _dt.date(year, month + 1, min(day.day, last)) + _dt.timedelta(days=days)


def fold_dates(tree: exp.Expression, copy: bool = True) -> exp.Expression:
    """Constant date arithmetic (`DATE '1998-12-01' - INTERVAL '90' DAY`, `DATE '1994-01-01' +
    INTERVAL '1' YEAR`, TPC-H's form), folded at analysis time to the DATE literal it makes.

    Why this is the same query: PostgreSQL computes date +- interval as a TIMESTAMP at midnight
    (the months added first with the day clamped to the month's end, then the days: shift_date
    does exactly that) and date + integer as a DATE; a DATE or TIMESTAMP column compared with a
    timestamp at midnight compares as with that date. The value depends on the query text alone,
    so folding it releases nothing; the literal it leaves is then checked like any DATE literal
    the analyst could have written (predicates: a real date, compared at its column's type, total
    on every row). What is not folded (a time of day, a column in the arithmetic, a result outside
    years 1-9999) is refused here, naming the accepted form. copy=False folds `tree` in place (a
    tree its caller owns and reads no more as it was)."""
    def fold(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, (exp.Add, exp.Sub)):
            return node
        left, right = node.this, node.expression
        if isinstance(node, exp.Add) and isinstance(left, exp.Interval):
            left, right = right, left          # interval + date
        left = fold(left)
        if not (isinstance(right, exp.Interval) or isinstance(left, exp.Interval)
                or _date_constant(left) is not None):
            return node
        day = _date_constant(left)
        if isinstance(right, exp.Interval):
            shift = _interval(right)
        elif (isinstance(right, exp.Literal) and not right.is_string and right.this.isdigit()
              and len(right.this) <= 7):
            shift = (0, int(right.this))
        else:
            shift = None
        if day is None or shift is None:
            raise QueryRejected(f"the date arithmetic {node.sql('postgres')}",
                                "only whole days, months and years added to a DATE literal are folded to a "
                                "date; other arithmetic on dates is not part of the subset",
                                ACCEPTED_DATE_ARITHMETIC)
        sign = -1 if isinstance(node, exp.Sub) else 1
        try:
            out = shift_date(day, sign * shift[0], sign * shift[1])
        except (OverflowError, ValueError):
            raise QueryRejected(f"the date arithmetic {node.sql('postgres')}",
                                "its result is outside the years 1 to 9999") from None
        return exp.Cast(this=exp.Literal.string(out.isoformat()), to=data_type("DATE"))

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Add, exp.Sub)) and any(isinstance(a, exp.Interval) or _date_constant(a) is not None
                                                        or isinstance(a, (exp.Add, exp.Sub))
                                                        for a in (node.this, node.expression)):
            folded = fold(node)
            return folded
        return node
    return tree.transform(visit, copy=copy)


def fold_numbers(tree: exp.Expression) -> exp.Expression:
    """Constant numeric arithmetic (`l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01`, TPC-H Q6's
    form) folded at analysis time to the literal PostgreSQL would compute: exactly, typed as
    PostgreSQL types it (integers stay integers, and integer division truncates toward zero; a
    numeric literal makes the result numeric). The value depends on the query text alone, so
    folding releases nothing; the literal it leaves is checked like one the analyst wrote. What
    does not fold to a terminating decimal (1.0 / 3), or divides by zero, is left as written (and
    refused or answered as before)."""
    def value(node: exp.Expression) -> tuple[Fraction, bool] | None:
        """(exact value, integer-typed) of a constant numeric expression, or None."""
        if isinstance(node, exp.Paren):
            return value(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            if not NUMBER.fullmatch(node.this):
                return None
            whole = node.this.isdigit() and int(node.this) < 2 ** 63
            return Fraction(node.this), whole
        if isinstance(node, exp.Neg):
            v = value(node.this)
            return None if v is None else (-v[0], v[1])
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            a, b = value(node.this), value(node.expression)
            if a is None or b is None:
                return None
            whole = a[1] and b[1]
            if isinstance(node, exp.Add):
                return a[0] + b[0], whole
            if isinstance(node, exp.Sub):
                return a[0] - b[0], whole
            if isinstance(node, exp.Mul):
                return a[0] * b[0], whole
            if b[0] == 0:
                return None
            q = a[0] / b[0]
            return (Fraction(int(q)), True) if whole else (q, False)     # int(): toward zero
        return None

    def literal(v: Fraction, whole: bool) -> exp.Expression | None:
        den, digits = v.denominator, 0
        while den % 10 == 0 or den % 2 == 0 or den % 5 == 0:
            if den % 10 == 0:
                den //= 10
            elif den % 2 == 0:
                den //= 2
            else:
                den //= 5
            digits += 1
        if den != 1 or digits > 30:
            return None                    # not a terminating decimal
        scale = max(digits, 0 if whole else 1)
        n = abs(v) * 10 ** scale                  # a whole number: v terminates within `scale` places
        text = str(int(n)).rjust(scale + 1, "0")
        text = f"{text[:-scale]}.{text[-scale:]}" if scale else text
        if not NUMBER.fullmatch(text) or (whole and abs(v) >= 2 ** 63):
            return None        # a literal the analyst could not write (or a bigint PostgreSQL overflows): as written
        lit = exp.Literal.number(text)
        return exp.Neg(this=lit) if v < 0 else lit

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            v = value(node)
            if v is not None:
                out = literal(*v)
                if out is not None:
                    return out
        return node
    # Conditions only (WHERE, HAVING, ON, FILTER): a SELECT item or GROUP BY key `1 * 0` must stay
    # as written to match its GROUP BY expression, and GROUP BY 0 would be a position
    for cond in [n for n in tree.find_all(exp.Where, exp.Having)] + \
            [j.args["on"] for j in tree.find_all(exp.Join) if j.args.get("on") is not None]:
        cond.replace(cond.transform(visit))
    return tree
