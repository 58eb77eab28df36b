"""Arithmetic on row values (+ - * / %, unary -, ABS's range, LEAST/GREATEST, ROUND/FLOOR/CEIL,
WIDTH_BUCKET): each result's range by interval arithmetic, checked to stay where no engine
overflows (|x| < 2^53 for BIGINT arithmetic, 1e300 for the real type), division and modulo only by
a non-zero literal, and SQL that computes what PostgreSQL computes on every engine
(dpsql.analysis.expressions has the whole argument).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.derived import MAX_DOMAIN, Derived, literal_number, literal_whole, operand, with_domain
from dpsql.analysis.sql import clamp, number
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import QueryRejected

_INT_LIMIT = Fraction(2) ** 53    # BIGINT arithmetic stays exact and far from overflow below this
_FLOAT_LIMIT = Fraction(10) ** 300


def _trunc(v: Fraction) -> Fraction:
    return Fraction(math.trunc(v))


class Arithmetic:
    """Derives arithmetic on numbers. derive(node) -> Derived derives an operand (any row
    expression: dpsql.analysis.expressions.Expressions.derive)."""

    def __init__(self, derive: Callable[[exp.Expression], Derived], dialect: EngineDialect):
        self.derive, self.dialect = derive, dialect

    def num(self, node: exp.Expression) -> Derived:
        d = self.derive(node)
        if d.kind == "bool":       # a condition as a number: CASE WHEN c THEN 1 ELSE 0 END
            raise QueryRejected("a condition in arithmetic", "write CASE WHEN <condition> THEN 1 ELSE 0 END")
        if d.kind != "num":
            raise QueryRejected(f"arithmetic on a {d.kind} value", "arithmetic applies to numbers")
        if not d.bounded:
            name = d.column[1].name if d.column else "the expression"
            raise QueryRejected(f"arithmetic on {name}", "the column has no declared bounds, so the result "
                                "could overflow on some rows", "ask the data owner to declare lower and upper bounds")
        return d

    def in_type(self, d: Derived, integral: bool) -> exp.Expression:
        """A part in the operation's type: as it is when whole, else in the dialect's real type."""
        if integral or d.sql_type == self.dialect.real:
            return operand(d.sql)
        return exp.Cast(this=d.sql, to=data_type(self.dialect.real))

    def result(self, sql: exp.Expression, lo: Fraction, hi: Fraction, integral: bool, *parts: Derived) -> Derived:
        """The result of an operation on derived parts: checked to stay where no engine overflows."""
        lo, hi = min(lo, hi), max(lo, hi)
        limit = _INT_LIMIT if integral else _FLOAT_LIMIT
        if abs(lo) >= limit or abs(hi) >= limit:
            raise QueryRejected("this arithmetic", "its result could grow beyond what the engine computes "
                                "without overflow", "use smaller factors, or narrower declared bounds")
        refs = frozenset().union(*(p.refs for p in parts))
        return Derived(sql, "num", "BIGINT" if integral else self.dialect.real, lo, hi, integral, None, refs,
                       floating=any(p.floating for p in parts))

    def binary(self, node: exp.Expression) -> Derived:
        a, b = self.num(node.this), self.num(node.expression)
        integral = a.integral and b.integral
        x, y = self.in_type(a, integral), self.in_type(b, integral)
        if isinstance(node, exp.Add):
            out = self.result(exp.Add(this=x, expression=y), a.lo + b.lo, a.hi + b.hi, integral, a, b)
        elif isinstance(node, exp.Sub):
            out = self.result(exp.Sub(this=x, expression=y), a.lo - b.hi, a.hi - b.lo, integral, a, b)
        else:
            p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            fl, fr = literal_number(node.this), literal_number(node.expression)
            f, other = (fr, a) if fl is None else (fl, b) if fr is None else (None, a)
            if not integral and f is not None and f.denominator != 1:   # x * 0.1 as x / 10: exact where
                out = self.result(self._scaled(other, f), min(p), max(p), False, a, b)   # PostgreSQL's is
            else:
                out = self.result(exp.Mul(this=x, expression=y), min(p), max(p), integral, a, b)
        if a.domain is not None and b.domain is not None and len(a.domain) * len(b.domain) <= MAX_DOMAIN:
            op = {exp.Add: lambda u, v: u + v, exp.Sub: lambda u, v: u - v, exp.Mul: lambda u, v: u * v}[type(node)]
            out = with_domain(out, {op(u, v) for u in a.domain for v in b.domain})
        return out

    def divide(self, node: exp.Expression) -> Derived:
        a = self.num(node.this)
        d = literal_number(node.expression)
        if d is None or d == 0:
            raise QueryRejected("division by anything but a non-zero number", "a divisor from the rows could be "
                                "zero on some of them, and the error would reveal it")
        # PostgreSQL's typing: integer / integer truncates (`typed` division, or DIV); a numeric
        # literal (10.0) makes the division exact whatever its value
        whole_divisor = d.denominator == 1 and literal_whole(node.expression)
        integral = a.integral and whole_divisor and (not isinstance(node, exp.Div) or bool(node.args.get("typed")))
        if integral:
            # PostgreSQL's integer division truncates toward zero; DuckDB's //, Spark's DIV too
            q = [_trunc(a.lo / d), _trunc(a.hi / d)]
            out = self.result(exp.IntDiv(this=operand(a.sql), expression=number(d)), min(q), max(q), True, a)
            if a.domain is not None:
                out = with_domain(out, {_trunc(v / d) for v in a.domain})
            elif a.hi - a.lo < MAX_DOMAIN * abs(d):
                out = with_domain(out, set(range(int(min(q)), int(max(q)) + 1)))
            return out
        q = [a.lo / d, a.hi / d]
        # typed: a plain `/` in every dialect. Untyped, sqlglot writes CAST(x AS DOUBLE PRECISION) / d
        # for PostgreSQL, whose float8 division raises on underflow (a tiny value / 3): an error on
        # one row, so an error oracle. The numerator is already in the dialect's real type.
        return self.result(self._scaled(a, Fraction(1) / d), min(q), max(q), False, a)

    def _scaled(self, a: Derived, f: Fraction) -> exp.Expression:
        """a * f for a literal factor f = p / q, computed as (a * p) / q in the dialect's real type:
        dividing by the whole number q is correctly rounded, so a whole a and a quotient that is
        exactly a whole number (30 / 0.1, CEIL(age / 10.0) at a bucket's edge) come out exact, as
        PostgreSQL's numeric arithmetic gives them; multiplying by 0.1's nearest double would not.
        typed: a plain `/` in every dialect. Untyped, sqlglot writes CAST(x AS DOUBLE PRECISION) / d
        for PostgreSQL, whose float8 division raises on underflow (a tiny value / 3): an error on
        one row, so an error oracle. The numerator is already in the dialect's real type."""
        x = self.in_type(a, False)
        if f.numerator != 1:
            self.result(exp.Null(), a.lo * f.numerator, a.hi * f.numerator, False, a)   # the product's range
            x = exp.Paren(this=exp.Mul(this=x, expression=number(Fraction(f.numerator))))
        if f.denominator == 1:
            return x.this if isinstance(x, exp.Paren) else x
        return exp.Div(this=x, expression=number(Fraction(f.denominator)), typed=True)

    def modulo(self, node: exp.Mod) -> Derived:
        a = self.num(node.this)
        d = literal_number(node.expression)
        if d is None or d == 0 or d.denominator != 1 or not a.integral:
            raise QueryRejected("% other than a whole number modulo a non-zero whole number",
                                "a divisor from the rows could be zero on some rows")
        m = abs(d) - 1
        lo = Fraction(0) if a.lo >= 0 else -min(m, -a.lo)
        hi = Fraction(0) if a.hi <= 0 else min(m, a.hi)
        out = self.result(exp.Mod(this=operand(a.sql), expression=number(abs(d))), lo, hi, True, a)
        if a.domain is not None:
            return with_domain(out, {Fraction(math.fmod(v, abs(d))) for v in a.domain})
        if hi - lo >= MAX_DOMAIN:   # never build a set of up to 2^53 values (memory an analyst could take)
            return out
        return with_domain(out, set(range(int(lo), int(hi) + 1)))

    def extreme(self, node: exp.Expression) -> Derived:
        parts = [self.num(node.this)] + [self.num(e) for e in node.expressions]
        if len(parts) == 1:         # LEAST(x) is x (Spark's LEAST and GREATEST take two or more)
            return parts[0]
        integral = all(p.integral for p in parts)
        least = isinstance(node, exp.Least)
        pick = min if least else max
        # PostgreSQL's LEAST/GREATEST skip NULL arguments (NULL only when all are): with a column
        # that may be NULL, the result can be any one argument's value, so the range is the union
        # of theirs on the side the NULL opens (GREATEST(x, 0) is 0 where x is NULL)
        nullable = any(p.refs for p in parts)
        lo = min(p.lo for p in parts) if least or nullable else max(p.lo for p in parts)
        hi = max(p.hi for p in parts) if not least or nullable else min(p.hi for p in parts)
        sql = type(node)(this=self.in_type(parts[0], integral), expressions=[self.in_type(p, integral) for p in parts[1:]],
                         ignore_nulls=True)     # the same on every engine (sqlglot writes each one's form)
        out = self.result(sql, lo, hi, integral, *parts)
        if all(p.domain is not None for p in parts) and math.prod(len(p.domain) + 1 for p in parts) <= MAX_DOMAIN:
            choices = [list(p.domain) + ([None] if p.refs else []) for p in parts]
            values = {pick(v for v in c if v is not None) for c in itertools.product(*choices)
                      if any(v is not None for v in c)}
            out = with_domain(out, values)
        return out

    def rounding(self, node: exp.Expression) -> Derived:
        a = self.num(node.this)
        places = node.args.get("decimals") if isinstance(node, exp.Round) else None
        n = literal_number(places) if places is not None else Fraction(0)
        if n is None or n.denominator != 1 or not 0 <= n <= 10:
            raise QueryRejected(f"{node.sql_name()} with these places", "give a whole number of places from 0 to 10")
        if a.integral:
            return a
        x = a.sql
        if isinstance(node, exp.Round):
            sql = self._round(a, int(n))
        else:
            sql = type(node)(this=x)
        step = Fraction(1, 10 ** int(n))
        down, up = {exp.Floor: (math.floor, math.floor), exp.Ceil: (math.ceil, math.ceil)}.get(
            type(node), (math.floor, math.ceil))       # ROUND: outward (ties go either way by engine)
        lo, hi = down(a.lo / step) * step, up(a.hi / step) * step
        if n:
            return self.result(sql, lo, hi, False, a)
        # to whole numbers: a BIGINT (the value is whole and within the checked range, so the cast
        # is exact and total), so the key prints alike on every engine and its domain is public
        out = self.result(exp.Cast(this=sql, to=data_type("BIGINT")), lo, hi, True, a)
        if hi - lo < MAX_DOMAIN:
            out = with_domain(out, set(range(int(lo), int(hi) + 1)))
        return out

    def _round(self, a: Derived, n: int) -> exp.Expression:
        """ROUND(a, n) as PostgreSQL computes it, the same on every engine. numeric: half away
        from zero, of the decimal value; double precision: ROUND(a) half to even (rint). (PostgreSQL
        has no ROUND(double precision, n); the grammar admits it, so it rounds as numeric does.)

        The engine holds a's value as a double, the nearest one to the decimal PostgreSQL would
        hold, so y = a * 10^n may sit an ulp or two below a tie that is exact in decimal (12.45
        is 12.4499999999999993 as a double) and an engine's ROUND(y) would go down. A tie is
        therefore recognised within 4 ulps (|y| * (1 + 2^-50)): data written as decimals of up to
        15 digits round as their decimals do; a double that is truly that close below a tie (not
        a decimal's nearest) would round up instead. Every step is total on the checked range."""
        x = self.in_type(a, False)
        y = x if n == 0 else exp.Paren(this=exp.Mul(this=x, expression=number(Fraction(10 ** n))))
        if a.floating and n == 0:   # rint: a tie goes to the even neighbour; 2 * ROUND(y / 2) is never a tie
            tie = exp.EQ(this=exp.Sub(this=y.copy(), expression=exp.Floor(this=y.copy())),
                         expression=number(Fraction(1, 2)))
            half = exp.Div(this=y.copy(), expression=number(Fraction(2)), typed=True)
            return exp.Case(ifs=[exp.If(this=tie, true=exp.Mul(this=number(Fraction(2)),
                                                                 expression=exp.Round(this=half)))],
                            default=exp.Round(this=y.copy()))
        self.result(exp.Null(), a.lo * 10 ** n, a.hi * 10 ** n, False, a)     # y's range
        if self.dialect.real != "DOUBLE":       # exact numeric (PostgreSQL): its ROUND is the rule itself
            return exp.Round(this=x, decimals=exp.Literal.number(n)) if n else exp.Round(this=x)
        nudge = exp.Cast(this=exp.Literal.number(repr(1 + 2 ** -50)), to=data_type(self.dialect.real))
        nudged = exp.Mul(this=exp.Abs(this=y.copy()), expression=nudge)
        away = exp.Mul(this=exp.Sign(this=y.copy()),
                       expression=exp.Floor(this=exp.Add(this=nudged, expression=number(Fraction(1, 2)))))
        if n == 0:
            return away
        return exp.Div(this=exp.Paren(this=away), expression=number(Fraction(10 ** n)), typed=True)

    def width_bucket(self, node: exp.WidthBucket) -> Derived:
        """WIDTH_BUCKET(x, low, high, n) with literal low < high and 1 <= n <= 10,000, as PostgreSQL
        defines it (0 below low, n + 1 at or above high, else floor((x - low) * n / (high - low)) + 1),
        written out so that every engine computes it the same way and none can fail (DuckDB has no
        WIDTH_BUCKET; PostgreSQL's raises on NaN and on low = high): x is the clamped column, so no
        NaN reaches the arithmetic, the division is by a non-zero literal, and every intermediate
        stays in the checked range. The result is clamped to the buckets the bounds of x can reach
        (a CASE, NULL stays NULL), so floating-point rounding at a bucket's edge cannot put a row
        outside the derived domain, which is those buckets."""
        a = self.num(node.this)
        lo, hi = (literal_number(node.args.get(k)) for k in ("min_value", "max_value"))
        n = literal_number(node.args.get("num_buckets")) if node.args.get("num_buckets") is not None else None
        if lo is None or hi is None or n is None or not lo < hi or n.denominator != 1 or not 1 <= n <= MAX_DOMAIN:
            raise QueryRejected("WIDTH_BUCKET with these arguments", "give literal bounds low < high and a "
                                f"whole number of buckets from 1 to {MAX_DOMAIN}")

        def bucket(v: Fraction) -> int:
            return 0 if v < lo else int(n) + 1 if v >= hi else math.floor((v - lo) * n / (hi - lo)) + 1
        b_lo, b_hi = bucket(a.lo), bucket(a.hi)
        self.result(exp.Null(), (a.lo - lo) * n, (a.hi - lo) * n, False, a)     # the scaled offset's range
        x = self.in_type(a, False)
        offset = exp.Div(this=exp.Mul(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=number(lo))),
                                      expression=number(n)),
                         expression=number(hi - lo), typed=True)
        inner = exp.Case(ifs=[exp.If(this=exp.LT(this=x.copy(), expression=number(lo)), true=number(0)),
                              exp.If(this=exp.GTE(this=x.copy(), expression=number(hi)),
                                     true=number(n + 1))],
                         default=exp.Add(this=exp.Floor(this=offset), expression=number(1)))
        sql = exp.Cast(this=clamp(inner, Fraction(b_lo), Fraction(b_hi)), to=data_type("BIGINT"))
        out = self.result(sql, Fraction(b_lo), Fraction(b_hi), True, a)
        return with_domain(out, {Fraction(v) for v in range(b_lo, b_hi + 1)})
