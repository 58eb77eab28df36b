"""Row expressions over declared columns: total SQL, derived ranges and public domains.

An analyst may aggregate or group by an expression (`SUM(CASE WHEN sex = 'F' THEN 1 ELSE 0
END)`, `GROUP BY age / 10 * 10`, `AVG(income / 1000)`). Each admitted expression gets

* SQL that is total on every value its columns' types can hold (an error that depends on one row
  is an exact, noise-free answer about that row): every numeric column is first clamped to its
  declared bounds (a CASE, total) and converted to BIGINT (whole numbers within the bounds) or
  DOUBLE (every clamped value converts), so the arithmetic after it works on values whose range
  is known; an operation is admitted only when the range of its result is finite and small
  enough that no engine can overflow (|x| < 2^53 for BIGINT arithmetic, 1e300 for DOUBLE),
  division and modulo only by a non-zero literal, and conditions only as dpsql.analysis
  .predicates admits them;
* a derived range (interval arithmetic), so SUM(expr) and AVG(expr) take their sensitivity from
  it with no new policy entry;
* a derived public domain where the expression can only take finitely many values that follow
  from public facts (CASE with literal results, a boolean condition, whole-number buckets of a
  bounded column, a function of a column with a declared domain): a GROUP BY on it releases
  exactly those values, as a declared domain does (the bounds and literals are public; the
  clamps make the values stay inside).

Admitted: + - * (unary -), / and % by a non-zero numeric literal (PostgreSQL's semantics: integer
division truncates toward zero, the same on every engine), ABS, LEAST, GREATEST, ROUND, FLOOR,
CEIL, WIDTH_BUCKET with literal arguments, COALESCE with a literal, CASE WHEN <condition> THEN <expr> ... [ELSE <expr>] END, and a
condition as a value (GROUP BY age > 50). Everything else is refused with its reason.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.analysis.predicates import CMP, NUMBER, NUMERIC, Predicates, date_bounds_problem, family, zoned
from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.dialects import EngineDialect
from dpsql.errors import QueryRejected

MAX_DOMAIN = 10_000          # values a derived domain may have; beyond, the key is thresholded
_INT_LIMIT = Fraction(2) ** 53    # BIGINT arithmetic stays exact and far from overflow below this
_FLOAT_LIMIT = Fraction(10) ** 300


@dataclass(frozen=True)
class Derived:
    """What the analysis knows of one row expression.

    kind: num | text | bool | date | timestamp | other. lo/hi: the range of a num (None: no
    bound known). integral: always a whole number. domain: every non-NULL value it can take,
    when finite and public. sql: total SQL for the engine. sql_type: its SQL type.
    refs: the columns it reads. column: the bare column it is, if it is one."""
    sql: exp.Expression
    kind: str
    sql_type: str
    lo: Fraction | None = None
    hi: Fraction | None = None
    integral: bool = False
    domain: tuple[Any, ...] | None = None
    refs: frozenset[ColRef] = frozenset()
    column: tuple[ColRef, ColumnInfo] | None = None
    span: tuple[_dt.date, _dt.date] | None = None    # a date's or timestamp's range (declared, or derived)
    floating: bool = False      # PostgreSQL would type it double precision (a float column or cast in it),
                                # not numeric: ROUND(x, n) does not exist for it there

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    def range(self) -> tuple[Fraction, Fraction]:
        assert self.lo is not None and self.hi is not None
        return self.lo, self.hi


_WHOLE_LITERAL = re.compile(r"\d+")


def _literal_whole(node: exp.Expression) -> bool:
    """Is this numeric literal an integer by PostgreSQL's typing? `10` is an integer (int4/int8),
    `10.0`, `1e1` and integers beyond int8 are numeric: `age / 10.0` divides exactly, `age / 10`
    truncates. The type comes from how the literal is written, never from its value."""
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    return (isinstance(node, exp.Literal) and not node.is_string and _WHOLE_LITERAL.fullmatch(node.this) is not None
            and int(node.this) < 2 ** 63)


def _operand(sql: exp.Expression) -> exp.Expression:
    """An operand of an operator, parenthesised when it is itself an operation: sqlglot writes a
    tree as it stands, so `a * (1 - b)` built as Mul(a, Sub(1, b)) without a Paren would be read
    back by the engine as `a * 1 - b`."""
    if isinstance(sql, (exp.Binary, exp.Unary)) and not isinstance(sql, exp.Paren):
        return exp.Paren(this=sql)
    return sql


def _float_type(sql_type: str) -> bool:
    """A double precision or real column (PostgreSQL's float types; DuckDB's DOUBLE, FLOAT)."""
    t = sql_type.upper()
    return t.startswith(("DOUBLE", "FLOAT", "REAL")) or t in ("FLOAT4", "FLOAT8")


def _literal_number(node: exp.Expression) -> Fraction | None:
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if isinstance(lit, exp.Paren):
        return _literal_number(lit.this) if not neg else (None if _literal_number(lit.this) is None
                                                         else -_literal_number(lit.this))
    if isinstance(lit, exp.Literal) and not lit.is_string:
        if not NUMBER.fullmatch(lit.this):
            raise QueryRejected("a malformed number", "write numbers in plain decimal form")
        v = Fraction(lit.this)
        return -v if neg else v
    return None


def _number_sql(v: Fraction) -> exp.Expression:
    from dpsql.analysis.sql import number
    return number(v)


class Expressions:
    """Derives row expressions. resolve(column, clause) -> (ColRef, ColumnInfo) for a declared
    column; predicates checks conditions (CASE WHEN, a condition as a value)."""

    def __init__(self, resolve: Callable[[exp.Column, str], tuple[ColRef, ColumnInfo]], dialect: EngineDialect,
                 predicates: Predicates, clause: str,
                 public_range: Callable[[ColRef], tuple[Fraction, Fraction] | None] | None = None):
        self.resolve, self.dialect, self.predicates, self.clause = resolve, dialect, predicates, clause
        self.public_range = public_range

    # -- entry
    def derive(self, node: exp.Expression) -> Derived:
        if isinstance(node, exp.Paren):
            return self.derive(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        lit = _literal_number(node)
        if lit is not None:
            # typed as its derived type: an untyped whole literal is an INTEGER on DuckDB and
            # PostgreSQL, so 2147483647 + 2147483647 in a row expression would overflow, on the rows
            # that reach it only (an error oracle); |lit| < 10^18 fits BIGINT, and the real type
            whole = _literal_whole(node)
            sql_type = "BIGINT" if whole else self.dialect.real
            return Derived(exp.Cast(this=_number_sql(lit), to=exp.DataType.build(sql_type)), "num", sql_type,
                           lit, lit, whole, (lit,))
        if isinstance(node, exp.Literal) and node.is_string:
            return Derived(node.copy(), "text", "VARCHAR", domain=(node.this,))
        if isinstance(node, exp.Boolean):
            return Derived(node.copy(), "bool", "BOOLEAN", domain=(bool(node.this),))
        if isinstance(node, exp.Null):
            return Derived(exp.Null(), "null", "NULL", domain=())
        if isinstance(node, exp.Neg):
            a = self._num(node.this)
            return self._arith(exp.Neg(this=_operand(a.sql)), -a.hi, -a.lo, a.integral, a)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            return self._binary(node)
        if isinstance(node, (exp.Div, exp.IntDiv)):
            return self._divide(node)
        if isinstance(node, exp.Mod):
            return self._modulo(node)
        if isinstance(node, exp.Abs):
            a = self._num(node.this)
            lo, hi = a.range()
            nlo = Fraction(0) if lo <= 0 <= hi else min(abs(lo), abs(hi))
            return self._arith(exp.Abs(this=a.sql), nlo, max(abs(lo), abs(hi)), a.integral, a)
        if isinstance(node, (exp.Least, exp.Greatest)):
            return self._extreme(node)
        if isinstance(node, (exp.Round, exp.Floor, exp.Ceil)):
            return self._rounding(node)
        if isinstance(node, exp.Coalesce):
            return self._coalesce(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, (exp.And, exp.Or, exp.Not, exp.Is, exp.In, exp.Between, exp.Like, exp.ILike,
                             *CMP)):
            return Derived(exp.Paren(this=self.predicates.check(node)), "bool", "BOOLEAN", domain=(False, True),
                           refs=_refs(node, self.resolve))
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
            return self._date_trunc(node)
        if isinstance(node, exp.Extract):
            return self._extract(node)
        if isinstance(node, exp.WidthBucket):
            return self._width_bucket(node)
        name = node.name.upper() if isinstance(node, exp.Anonymous) else \
            node.sql_name() if isinstance(node, exp.Func) else type(node).__name__
        raise QueryRejected(f"{name} in an expression",
                            "only + - * / %, ABS, LEAST, GREATEST, ROUND, FLOOR, CEIL, WIDTH_BUCKET, COALESCE, CASE, "
                            "date_trunc, EXTRACT/date_part and conditions are admitted in expressions, each "
                            "proven not to fail on any row")

    # -- columns
    def _column(self, node: exp.Column) -> Derived:
        ref, info = self.resolve(node, self.clause)
        col = exp.column(ref[1], table=ref[0])
        fam = family(info.sql_type)
        if fam in NUMERIC and info.public and not info.bounded and self.public_range is not None:
            # a public table's values are public: its column's range is read from the table itself
            # (dpsql.analysis.analyze._public_range) and clamps it like declared bounds
            span = self.public_range(ref)
            if span is not None:
                info = replace(info, bounds=span, integral=fam == "int" and all(b.denominator == 1 for b in span))
        if fam in NUMERIC:
            if not info.bounded:
                return Derived(col, "num", info.sql_type, refs=frozenset({ref}), column=(ref, info),
                               integral=fam == "int")
            lo, hi = info.range()
            whole = fam == "int" and info.whole_bounds
            clamped = _clamp(col, lo, hi)
            real = self.dialect.real
            sql = exp.Cast(this=clamped, to=exp.DataType.build("BIGINT" if whole else real))
            return Derived(sql, "num", "BIGINT" if whole else real, lo, hi, whole, refs=frozenset({ref}),
                           column=(ref, info), floating=_float_type(info.sql_type))
        kind = {"text": "text", "bool": "bool", "date": "date", "timestamp": "timestamp"}.get(fam, "other")
        if kind == "date" and info.public and info.span is None and self.public_range is not None:
            # a public DATE column's first and last dates are public, read from the table itself
            # (analyze._public_range); the clamp to them is then the identity on every row
            span = self.public_range(ref, "date")
            if span is not None:
                lo, hi = span
                return Derived(_clamp_date(col, lo, hi), "date", "DATE", refs=frozenset({ref}), column=(ref, info),
                               span=(lo, hi))
        if kind == "date" and info.span is not None and date_bounds_problem(info.policy, info.sql_type) is None:
            lo, hi = info.span
            return Derived(_clamp_date(col, lo, hi), "date", "DATE", refs=frozenset({ref}), column=(ref, info),
                           span=(lo, hi))
        if (kind == "timestamp" and info.span is not None and self.dialect.wall_clock_timestamps
                and date_bounds_problem(info.policy, info.sql_type) is None):
            lo, hi = info.policy.time_span
            # The clamp's comparisons meet TIMESTAMP constants (total: 'infinity', BC and year
            # 294276 order on DuckDB and PostgreSQL; a nanosecond column's bounds are within its
            # range, date_bounds_problem). The clamped value lies in years 1-9999 and is cast to
            # TIMESTAMP (microseconds): from TIMESTAMP_S/_MS/_NS or timestamp(p) that conversion
            # is total there, so the functions after it meet one type on every engine.
            sql = exp.Cast(this=_clamp_date(col, lo, hi), to=exp.DataType.build("TIMESTAMP"))
            return Derived(sql, "timestamp", "TIMESTAMP", refs=frozenset({ref}), column=(ref, info), span=(lo, hi))
        domain = info.domain
        if kind == "bool":
            domain = (False, True)
        return Derived(col, kind, info.sql_type, domain=tuple(domain) if domain is not None else None,
                       refs=frozenset({ref}), column=(ref, info))

    def _num(self, node: exp.Expression) -> Derived:
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

    def _as(self, d: Derived, integral: bool) -> exp.Expression:
        """A part in the operation's type: as it is when whole, else in the dialect's real type."""
        if integral or d.sql_type == self.dialect.real:
            return _operand(d.sql)
        return exp.Cast(this=d.sql, to=exp.DataType.build(self.dialect.real))

    # -- arithmetic
    def _arith(self, sql: exp.Expression, lo: Fraction, hi: Fraction, integral: bool, *parts: Derived) -> Derived:
        """The result of an operation on derived parts: checked to stay where no engine overflows."""
        lo, hi = min(lo, hi), max(lo, hi)
        limit = _INT_LIMIT if integral else _FLOAT_LIMIT
        if abs(lo) >= limit or abs(hi) >= limit:
            raise QueryRejected("this arithmetic", "its result could grow beyond what the engine computes "
                                "without overflow", "use smaller factors, or narrower declared bounds")
        refs = frozenset().union(*(p.refs for p in parts))
        return Derived(sql, "num", "BIGINT" if integral else self.dialect.real, lo, hi, integral, None, refs,
                       floating=any(p.floating for p in parts))

    def _binary(self, node: exp.Expression) -> Derived:
        a, b = self._num(node.this), self._num(node.expression)
        integral = a.integral and b.integral
        x, y = self._as(a, integral), self._as(b, integral)
        if isinstance(node, exp.Add):
            out = self._arith(exp.Add(this=x, expression=y), a.lo + b.lo, a.hi + b.hi, integral, a, b)
        elif isinstance(node, exp.Sub):
            out = self._arith(exp.Sub(this=x, expression=y), a.lo - b.hi, a.hi - b.lo, integral, a, b)
        else:
            p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            fl, fr = _literal_number(node.this), _literal_number(node.expression)
            f, other = (fr, a) if fl is None else (fl, b) if fr is None else (None, a)
            if not integral and f is not None and f.denominator != 1:   # x * 0.1 as x / 10: exact where
                out = self._arith(self._scaled(other, f), min(p), max(p), False, a, b)   # PostgreSQL's is
            else:
                out = self._arith(exp.Mul(this=x, expression=y), min(p), max(p), integral, a, b)
        if a.domain is not None and b.domain is not None and len(a.domain) * len(b.domain) <= MAX_DOMAIN:
            op = {exp.Add: lambda u, v: u + v, exp.Sub: lambda u, v: u - v, exp.Mul: lambda u, v: u * v}[type(node)]
            out = _with_domain(out, {op(u, v) for u in a.domain for v in b.domain})
        return out

    def _divide(self, node: exp.Expression) -> Derived:
        a = self._num(node.this)
        d = _literal_number(node.expression)
        if d is None or d == 0:
            raise QueryRejected("division by anything but a non-zero number", "a divisor from the rows could be "
                                "zero on some of them, and the error would reveal it")
        # PostgreSQL's typing: integer / integer truncates (`typed` division, or DIV); a numeric
        # literal (10.0) makes the division exact whatever its value
        whole_divisor = d.denominator == 1 and _literal_whole(node.expression)
        integral = a.integral and whole_divisor and (not isinstance(node, exp.Div) or bool(node.args.get("typed")))
        if integral:
            # PostgreSQL's integer division truncates toward zero; DuckDB's //, Spark's DIV too
            q = [_trunc(a.lo / d), _trunc(a.hi / d)]
            out = self._arith(exp.IntDiv(this=_operand(a.sql), expression=_number_sql(d)), min(q), max(q), True, a)
            if a.domain is not None:
                out = _with_domain(out, {_trunc(v / d) for v in a.domain})
            elif a.hi - a.lo < MAX_DOMAIN * abs(d):
                out = _with_domain(out, set(range(int(min(q)), int(max(q)) + 1)))
            return out
        q = [a.lo / d, a.hi / d]
        # typed: a plain `/` in every dialect. Untyped, sqlglot writes CAST(x AS DOUBLE PRECISION) / d
        # for PostgreSQL, whose float8 division raises on underflow (a tiny value / 3): an error on
        # one row, so an error oracle. The numerator is already in the dialect's real type.
        return self._arith(self._scaled(a, Fraction(1) / d), min(q), max(q), False, a)

    def _scaled(self, a: Derived, f: Fraction) -> exp.Expression:
        """a * f for a literal factor f = p / q, computed as (a * p) / q in the dialect's real type:
        dividing by the whole number q is correctly rounded, so a whole a and a quotient that is
        exactly a whole number (30 / 0.1, CEIL(age / 10.0) at a bucket's edge) come out exact, as
        PostgreSQL's numeric arithmetic gives them; multiplying by 0.1's nearest double would not.
        typed: a plain `/` in every dialect. Untyped, sqlglot writes CAST(x AS DOUBLE PRECISION) / d
        for PostgreSQL, whose float8 division raises on underflow (a tiny value / 3): an error on
        one row, so an error oracle. The numerator is already in the dialect's real type."""
        x = self._as(a, False)
        if f.numerator != 1:
            self._arith(exp.Null(), a.lo * f.numerator, a.hi * f.numerator, False, a)   # the product's range
            x = exp.Paren(this=exp.Mul(this=x, expression=_number_sql(Fraction(f.numerator))))
        if f.denominator == 1:
            return x.this if isinstance(x, exp.Paren) else x
        return exp.Div(this=x, expression=_number_sql(Fraction(f.denominator)), typed=True)

    def _modulo(self, node: exp.Mod) -> Derived:
        a = self._num(node.this)
        d = _literal_number(node.expression)
        if d is None or d == 0 or d.denominator != 1 or not a.integral:
            raise QueryRejected("% other than a whole number modulo a non-zero whole number",
                                "a divisor from the rows could be zero on some rows")
        m = abs(d) - 1
        lo = Fraction(0) if a.lo >= 0 else -min(m, -a.lo)
        hi = Fraction(0) if a.hi <= 0 else min(m, a.hi)
        out = self._arith(exp.Mod(this=_operand(a.sql), expression=_number_sql(abs(d))), lo, hi, True, a)
        if a.domain is not None:
            return _with_domain(out, {Fraction(math.fmod(v, abs(d))) for v in a.domain})
        if hi - lo >= MAX_DOMAIN:   # never build a set of up to 2^53 values (memory an analyst could take)
            return out
        return _with_domain(out, set(range(int(lo), int(hi) + 1)))

    def _extreme(self, node: exp.Expression) -> Derived:
        parts = [self._num(node.this)] + [self._num(e) for e in node.expressions]
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
        sql = type(node)(this=self._as(parts[0], integral), expressions=[self._as(p, integral) for p in parts[1:]],
                         ignore_nulls=True)     # the same on every engine (sqlglot writes each one's form)
        out = self._arith(sql, lo, hi, integral, *parts)
        if all(p.domain is not None for p in parts) and math.prod(len(p.domain) + 1 for p in parts) <= MAX_DOMAIN:
            import itertools
            choices = [list(p.domain) + ([None] if p.refs else []) for p in parts]
            values = {pick(v for v in c if v is not None) for c in itertools.product(*choices)
                      if any(v is not None for v in c)}
            out = _with_domain(out, values)
        return out

    def _rounding(self, node: exp.Expression) -> Derived:
        a = self._num(node.this)
        places = node.args.get("decimals") if isinstance(node, exp.Round) else None
        n = _literal_number(places) if places is not None else Fraction(0)
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
            return self._arith(sql, lo, hi, False, a)
        # to whole numbers: a BIGINT (the value is whole and within the checked range, so the cast
        # is exact and total), so the key prints alike on every engine and its domain is public
        out = self._arith(exp.Cast(this=sql, to=exp.DataType.build("BIGINT")), lo, hi, True, a)
        if hi - lo < MAX_DOMAIN:
            out = _with_domain(out, set(range(int(lo), int(hi) + 1)))
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
        x = self._as(a, False)
        y = x if n == 0 else exp.Paren(this=exp.Mul(this=x, expression=_number_sql(Fraction(10 ** n))))
        if a.floating and n == 0:   # rint: a tie goes to the even neighbour; 2 * ROUND(y / 2) is never a tie
            tie = exp.EQ(this=exp.Sub(this=y.copy(), expression=exp.Floor(this=y.copy())),
                         expression=_number_sql(Fraction(1, 2)))
            half = exp.Div(this=y.copy(), expression=_number_sql(Fraction(2)), typed=True)
            return exp.Case(ifs=[exp.If(this=tie, true=exp.Mul(this=_number_sql(Fraction(2)),
                                                                 expression=exp.Round(this=half)))],
                            default=exp.Round(this=y.copy()))
        self._arith(exp.Null(), a.lo * 10 ** n, a.hi * 10 ** n, False, a)     # y's range
        if self.dialect.real != "DOUBLE":       # exact numeric (PostgreSQL): its ROUND is the rule itself
            return exp.Round(this=x, decimals=exp.Literal.number(n)) if n else exp.Round(this=x)
        nudge = exp.Cast(this=exp.Literal.number(repr(1 + 2 ** -50)), to=exp.DataType.build(self.dialect.real))
        nudged = exp.Mul(this=exp.Abs(this=y.copy()), expression=nudge)
        away = exp.Mul(this=exp.Sign(this=y.copy()),
                       expression=exp.Floor(this=exp.Add(this=nudged, expression=_number_sql(Fraction(1, 2)))))
        if n == 0:
            return away
        return exp.Div(this=exp.Paren(this=away), expression=_number_sql(Fraction(10 ** n)), typed=True)

    def _width_bucket(self, node: exp.WidthBucket) -> Derived:
        """WIDTH_BUCKET(x, low, high, n) with literal low < high and 1 <= n <= 10,000, as PostgreSQL
        defines it (0 below low, n + 1 at or above high, else floor((x - low) * n / (high - low)) + 1),
        written out so that every engine computes it the same way and none can fail (DuckDB has no
        WIDTH_BUCKET; PostgreSQL's raises on NaN and on low = high): x is the clamped column, so no
        NaN reaches the arithmetic, the division is by a non-zero literal, and every intermediate
        stays in the checked range. The result is clamped to the buckets the bounds of x can reach
        (a CASE, NULL stays NULL), so floating-point rounding at a bucket's edge cannot put a row
        outside the derived domain, which is those buckets."""
        a = self._num(node.this)
        lo, hi = (_literal_number(node.args.get(k)) for k in ("min_value", "max_value"))
        n = _literal_number(node.args.get("num_buckets")) if node.args.get("num_buckets") is not None else None
        if lo is None or hi is None or n is None or not lo < hi or n.denominator != 1 or not 1 <= n <= MAX_DOMAIN:
            raise QueryRejected("WIDTH_BUCKET with these arguments", "give literal bounds low < high and a "
                                f"whole number of buckets from 1 to {MAX_DOMAIN}")

        def bucket(v: Fraction) -> int:
            return 0 if v < lo else int(n) + 1 if v >= hi else math.floor((v - lo) * n / (hi - lo)) + 1
        b_lo, b_hi = bucket(a.lo), bucket(a.hi)
        self._arith(exp.Null(), (a.lo - lo) * n, (a.hi - lo) * n, False, a)     # the scaled offset's range
        x = self._as(a, False)
        offset = exp.Div(this=exp.Mul(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=_number_sql(lo))),
                                      expression=_number_sql(n)),
                         expression=_number_sql(hi - lo), typed=True)
        inner = exp.Case(ifs=[exp.If(this=exp.LT(this=x.copy(), expression=_number_sql(lo)), true=_number_sql(0)),
                              exp.If(this=exp.GTE(this=x.copy(), expression=_number_sql(hi)),
                                     true=_number_sql(n + 1))],
                         default=exp.Add(this=exp.Floor(this=offset), expression=_number_sql(1)))
        sql = exp.Cast(this=_clamp(inner, Fraction(b_lo), Fraction(b_hi)), to=exp.DataType.build("BIGINT"))
        out = self._arith(sql, Fraction(b_lo), Fraction(b_hi), True, a)
        return _with_domain(out, {Fraction(v) for v in range(b_lo, b_hi + 1)})

    def _coalesce(self, node: exp.Coalesce) -> Derived:
        parts = [self.derive(node.this)] + [self.derive(e) for e in node.expressions]
        return self._union(exp.Coalesce(this=parts[0].sql, expressions=[p.sql for p in parts[1:]]), parts,
                           nullable_last=True)

    def _case(self, node: exp.Case) -> Derived:
        if node.this is not None:
            raise QueryRejected("CASE <expr> WHEN <value>", "write CASE WHEN <condition> THEN ...")
        ifs, parts = [], []
        for branch in node.args.get("ifs") or []:
            cond = self.predicates.check(branch.this)
            value = self.derive(branch.args["true"])
            ifs.append(exp.If(this=cond, true=value.sql))
            parts.append(value)
        default = node.args.get("default")
        if default is not None:
            parts.append(self.derive(default))
        out = self._union(exp.Case(ifs=ifs, default=parts[-1].sql if default is not None else None), parts)
        refs = frozenset().union(*(p.refs for p in parts), _refs(node, self.resolve))
        return Derived(out.sql, out.kind, out.sql_type, out.lo, out.hi, out.integral, out.domain, refs,
                       floating=out.floating)

    def _union(self, sql: exp.Expression, parts: list[Derived], nullable_last: bool = False) -> Derived:
        """CASE branches or COALESCE arguments: the union of their ranges and domains, one kind."""
        kinds = {p.kind for p in parts if p.kind != "null"}
        if len(kinds) > 1:
            raise QueryRejected("branches of different types", "every branch must have the same type")
        kind = kinds.pop() if kinds else "null"
        refs = frozenset().union(*(p.refs for p in parts))
        domain = None
        if all(p.domain is not None for p in parts):
            domain = tuple(_ordered(set().union(*(set(p.domain) for p in parts))))
        if kind == "num":
            real = [p for p in parts if p.kind == "num"]
            if not all(p.bounded for p in real):
                raise QueryRejected("a branch without bounds", "every numeric branch needs declared bounds")
            integral = all(p.integral for p in real)
            lo, hi = min(p.lo for p in real), max(p.hi for p in real)
            if not integral:       # every branch the same SQL type: the dialect's real type
                if isinstance(sql, exp.Case):
                    for i, p in zip(sql.args.get("ifs") or [], real):
                        i.set("true", self._as(p, False))
                    if sql.args.get("default") is not None:
                        sql.set("default", self._as(real[-1], False))
                else:
                    sql = exp.Coalesce(this=self._as(real[0], False), expressions=[self._as(p, False) for p in real[1:]])
            out = self._arith(sql, lo, hi, integral, *real)
            return Derived(out.sql, "num", out.sql_type, lo, hi, integral, domain, refs, floating=out.floating)
        sql_type = next((p.sql_type for p in parts if p.kind == kind), "VARCHAR")
        return Derived(sql, kind, sql_type if kind != "text" else "VARCHAR", domain=domain, refs=refs)

    def _cast(self, node: exp.Cast) -> Derived:
        a = self.derive(node.this)
        to = node.to
        if a.kind == "num" and to.is_type(*exp.DataType.REAL_TYPES, *exp.DataType.INTEGER_TYPES):
            if to.is_type(*exp.DataType.INTEGER_TYPES):
                if not a.integral:
                    raise QueryRejected("CAST of a fraction to an integer", "engines round it differently",
                                        "use ROUND, FLOOR or CEIL")
                return a
            return Derived(self._as(a, False), "num", self.dialect.real, a.lo, a.hi, False, a.domain, a.refs,
                           floating=to.is_type(exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT))
        raise QueryRejected("CAST", "a cast can fail on some rows, and the error would reveal them")


    # -- dates
    def _date(self, node: exp.Expression, what: str) -> Derived:
        """The DATE or TIMESTAMP argument of a date function: admitted only clamped to declared
        bounds (so within years 1-9999), and a TIMESTAMP only where its dates and hours do not
        depend on the session's time zone."""
        d = self.derive(node)
        if d.kind in ("date", "timestamp") and d.span is not None:
            return d
        name = d.column[1].name if d.column else "the value"
        if d.kind not in ("date", "timestamp"):
            raise QueryRejected(f"{what} of a {d.kind} value", "it applies to dates and timestamps")
        info = d.column[1] if d.column else None
        stamp = d.kind == "timestamp"
        if stamp and not self.dialect.wall_clock_timestamps:
            raise QueryRejected(f"{what} of a TIMESTAMP column on Spark", "Spark reports its TIMESTAMP (in the "
                                "session's time zone) and TIMESTAMP_NTZ alike, so the result could depend on "
                                "the session's time zone", "group by a DATE column")
        if stamp and info is not None and zoned(info.sql_type):
            raise QueryRejected(f"{what} of {name}, a TIMESTAMP WITH TIME ZONE", "its dates and hours depend "
                                "on the session's time zone", "use a TIMESTAMP column without time zone")
        if info is not None and info.span is not None:
            raise QueryRejected(f"{what} of {name}", date_bounds_problem(info.policy, info.sql_type) or
                                "its declared bounds do not fit its type")
        raise QueryRejected(f"{what} of {name}" + (" (a TIMESTAMP)" if stamp else ""),
                            f"the column has no declared {'' if stamp else 'date '}bounds, so the "
                            "function could fail on some rows ('infinity', years past 9999)",
                            f"ask the data owner to declare lower and upper {'date-times' if stamp else 'dates'}")

    def _date_trunc(self, node: exp.Expression) -> Derived:
        """date_trunc('unit', d) of a DATE with declared bounds: the clamp keeps d inside years
        1-9999, where the conversion to TIMESTAMP and the truncation are total on every engine
        (the conversion is written out, so PostgreSQL does not pick its timestamptz form, which
        depends on the session's time zone); the result is cast back to DATE. Its derived domain
        is every truncated date between the bounds' truncations."""
        unit = node.args.get("unit")
        name = (unit.name if unit is not None else "").lower()
        if name not in _TRUNC_UNITS + _TIME_UNITS:
            raise QueryRejected(f"date_trunc('{name}', ...)", f"the units admitted are {', '.join(_TRUNC_UNITS)} "
                                f"(and {', '.join(_TIME_UNITS)} of a TIMESTAMP)")
        d = self._date(node.this, "date_trunc")
        if d.kind == "date" and name in _TIME_UNITS:
            raise QueryRejected(f"date_trunc('{name}', ...) of a DATE", f"the units admitted for dates are "
                                f"{', '.join(_TRUNC_UNITS)}")
        lo, hi = (_truncate(v, name) for v in d.span)
        if d.kind == "timestamp":
            # date_trunc of the clamped TIMESTAMP (years 1-9999; a week of 0001-01-01, a Monday,
            # starts on it): total on DuckDB and PostgreSQL, a TIMESTAMP without zone.
            sql = exp.TimestampTrunc(this=d.sql, unit=exp.var(name.upper()))
        elif name == "day":
            sql = d.sql
        else:
            ts = exp.Cast(this=d.sql, to=exp.DataType.build("TIMESTAMP"))
            sql = exp.Cast(this=exp.TimestampTrunc(this=ts, unit=exp.var(name.upper())),
                           to=exp.DataType.build("DATE"))
        domain = None
        values, v = [], lo
        while v <= hi and len(values) <= MAX_DOMAIN and (not values or v > values[-1]):
            values.append(v)
            v = _truncate(_step(v, name), name)
        if len(values) <= MAX_DOMAIN:
            domain = tuple(values)
        return Derived(sql, d.kind, d.sql_type, domain=domain, refs=d.refs, span=(lo, hi))

    def _extract(self, node: exp.Extract) -> Derived:
        """EXTRACT(field FROM d) / date_part('field', d) of a DATE with declared bounds, as a
        BIGINT: total on the clamped date on every engine (PostgreSQL's numeric result converts
        exactly). Spark numbers DOW 1-7 from Sunday; PostgreSQL and DuckDB 0-6: Spark's is
        shifted. Its derived range and domain are computed from the bounds with Python's
        (proleptic Gregorian) calendar, which all three engines use."""
        field = node.this.name.lower() if node.this is not None else ""
        field = _FIELD_ALIASES.get(field, field)
        if field not in _FIELDS:
            raise QueryRejected(f"EXTRACT({field.upper()} ...)", f"the fields admitted are "
                                f"{', '.join(f for f in _FIELDS if f not in _TIME_FIELDS)} (and "
                                f"{', '.join(_TIME_FIELDS)} of a TIMESTAMP)")
        d = self._date(node.expression, "EXTRACT")
        if d.kind == "date" and field in _TIME_FIELDS:
            raise QueryRejected(f"EXTRACT({field.upper()} ...) of a DATE", "a date has no time of day")
        spark = self.dialect.name == "spark"
        part = {"dow": "DAYOFWEEK" if spark else "DOW", "isodow": "DAYOFWEEK_ISO" if spark else "ISODOW"}.get(
            field, field.upper())
        sql: exp.Expression = exp.Extract(this=exp.var(part), expression=d.sql)
        if spark and field == "dow":
            sql = exp.Sub(this=sql, expression=exp.Literal.number(1))
        sql = exp.Cast(this=sql, to=exp.DataType.build("BIGINT"))
        lo, hi = (v.date() if isinstance(v, _dt.datetime) else v for v in d.span)
        if field in _TIME_FIELDS:
            values = set(range(*_FIELD_RANGE[field]))
        elif (hi - lo).days <= 4 * 366:
            values = {_FIELDS[field](lo + _dt.timedelta(days=i)) for i in range((hi - lo).days + 1)}
        elif field == "year":
            values = set(range(lo.year, hi.year + 1))
        else:
            values = set(range(*_FIELD_RANGE[field]))
        out = self._arith(sql, Fraction(min(values)), Fraction(max(values)), True, d)
        return _with_domain(out, {Fraction(v) for v in values})


_TRUNC_UNITS = ("year", "quarter", "month", "week", "day")
_TIME_UNITS = ("hour", "minute")                # TIMESTAMP only
_TIME_FIELDS = ("hour", "minute")               # TIMESTAMP only (whole numbers on every engine; not SECOND)
_FIELD_ALIASES = {"years": "year", "months": "month", "days": "day", "dayofweek": "dow", "dayofyear": "doy",
                  "weeks": "week", "quarters": "quarter", "hours": "hour", "minutes": "minute"}
_FIELDS: dict[str, Callable[[_dt.date], int]] = {
    "year": lambda d: d.year,
    "quarter": lambda d: (d.month - 1) // 3 + 1,
    "month": lambda d: d.month,
    "week": lambda d: d.isocalendar()[1],
    "day": lambda d: d.day,
    "dow": lambda d: d.isoweekday() % 7,
    "isodow": lambda d: d.isoweekday(),
    "doy": lambda d: d.timetuple().tm_yday,
    "hour": lambda d: d.hour,
    "minute": lambda d: d.minute,
}
_FIELD_RANGE = {"quarter": (1, 5), "month": (1, 13), "week": (1, 54), "day": (1, 32), "dow": (0, 7),
                "isodow": (1, 8), "doy": (1, 367), "hour": (0, 24), "minute": (0, 60)}


def _truncate(v: _dt.date, unit: str) -> _dt.date:
    """v truncated to the unit, as date_trunc does (a datetime stays a datetime)."""
    if isinstance(v, _dt.datetime):
        if unit == "minute":
            return v.replace(second=0, microsecond=0)
        if unit == "hour":
            return v.replace(minute=0, second=0, microsecond=0)
        v = v.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "year":
        return v.replace(month=1, day=1)
    if unit == "quarter":
        return v.replace(month=(v.month - 1) // 3 * 3 + 1, day=1)
    if unit == "month":
        return v.replace(day=1)
    if unit == "week":
        return v - _dt.timedelta(days=v.weekday())     # ISO weeks start on Monday on every engine
    return v


def _step(v: _dt.date, unit: str) -> _dt.date:
    """The first date (or time) of the unit after v's (v truncated); past 9999-12-31 the largest
    value of v's type (the loop ends: it exceeds every truncated bound)."""
    try:
        if unit in _TIME_UNITS:
            return v + _dt.timedelta(hours=1 if unit == "hour" else 0, minutes=1 if unit == "minute" else 0)
        if unit in ("year", "quarter", "month"):
            months = {"year": 12, "quarter": 3, "month": 1}[unit]
            m = v.month - 1 + months
            return v.replace(year=v.year + m // 12, month=m % 12 + 1, day=1)
        return v + _dt.timedelta(days=7 if unit == "week" else 1)
    except (ValueError, OverflowError):
        return _dt.datetime.max if isinstance(v, _dt.datetime) else _dt.date.max


def _clamp_date(value: exp.Expression, lo: _dt.date, hi: _dt.date) -> exp.Expression:
    """CASE WHEN d < DATE lo THEN DATE lo WHEN d > DATE hi THEN DATE hi ELSE d END: comparisons of a
    DATE with a DATE constant are total on every engine ('infinity' and BC dates order); NULL
    stays NULL. With datetime bounds (a TIMESTAMP column without zone) the constants are
    TIMESTAMPs, compared as dpsql.analysis.predicates admits a TIMESTAMP column with a literal."""
    def lit(v: _dt.date) -> exp.Expression:
        if isinstance(v, _dt.datetime):
            return exp.Cast(this=exp.Literal.string(v.isoformat(sep=" ")), to=exp.DataType.build("TIMESTAMP"))
        return exp.Cast(this=exp.Literal.string(v.isoformat()), to=exp.DataType.build("DATE"))
    return exp.Case(ifs=[exp.If(this=exp.LT(this=value.copy(), expression=lit(lo)), true=lit(lo)),
                         exp.If(this=exp.GT(this=value.copy(), expression=lit(hi)), true=lit(hi))],
                    default=value.copy())


def _clamp(value: exp.Expression, lo: Fraction, hi: Fraction) -> exp.Expression:
    from dpsql.analysis.sql import clamp
    return clamp(value, lo, hi)


def _trunc(v: Fraction) -> Fraction:
    return Fraction(math.trunc(v))


def _with_domain(d: Derived, values: set) -> Derived:
    if len(values) > MAX_DOMAIN:
        return d
    return Derived(d.sql, d.kind, d.sql_type, d.lo, d.hi, d.integral, tuple(_ordered(values)), d.refs)


def _ordered(values: set) -> list:
    return sorted(values, key=lambda v: (v is None, type(v).__name__, v if not isinstance(v, bool) else int(v)))


def _refs(node: exp.Expression, resolve) -> frozenset[ColRef]:
    out = set()
    for c in node.find_all(exp.Column):
        try:
            out.add(resolve(c, "WHERE")[0])
        except QueryRejected:
            pass
    return frozenset(out)
