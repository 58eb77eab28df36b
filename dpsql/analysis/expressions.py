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

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Protocol

from sqlglot import exp

from dpsql.analysis.arithmetic import Arithmetic
from dpsql.analysis.dates import DateFunctions, clamp_date
from dpsql.analysis.derived import Derived, literal_number, literal_whole, operand, ordered
from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.analysis.sql import clamp, number
from dpsql.analysis.sqltypes import NUMERIC, date_bounds_problem, family, float_type
from dpsql.analysis.subset import CMP
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import QueryRejected


class Conditions(Protocol):
    """What checks the conditions inside a row expression (CASE WHEN, a condition as a value):
    dpsql.analysis.predicates.Predicates, given by the caller."""

    def check(self, node: exp.Expression) -> exp.Expression: ...


class Expressions:
    """Derives row expressions. resolve(column, clause) -> (ColRef, ColumnInfo) for a declared
    column; predicates checks conditions (CASE WHEN, a condition as a value)."""

    def __init__(self, resolve: Callable[[exp.Column, str], tuple[ColRef, ColumnInfo]], dialect: EngineDialect,
                 predicates: Conditions, clause: str,
                 public_range: Callable[[ColRef], tuple[Fraction, Fraction] | None] | None = None):
        self.resolve, self.dialect, self.predicates, self.clause = resolve, dialect, predicates, clause
        self.public_range = public_range
        self.arith = Arithmetic(self.derive, dialect)
        self.dates = DateFunctions(self.derive, dialect, self.arith)

    # -- entry
    def derive(self, node: exp.Expression) -> Derived:
        if isinstance(node, exp.Paren):
            return self.derive(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        lit = literal_number(node)
        if lit is not None:
            # typed as its derived type: an untyped whole literal is an INTEGER on DuckDB and
            # PostgreSQL, so 2147483647 + 2147483647 in a row expression would overflow, on the rows
            # that reach it only (an error oracle); |lit| < 10^18 fits BIGINT, and the real type
            whole = literal_whole(node)
            sql_type = "BIGINT" if whole else self.dialect.real
            return Derived(exp.Cast(this=number(lit), to=data_type(sql_type)), "num", sql_type,
                           lit, lit, whole, (lit,))
        if isinstance(node, exp.Literal) and node.is_string:
            return Derived(node.copy(), "text", "VARCHAR", domain=(node.this,))
        if isinstance(node, exp.Boolean):
            return Derived(node.copy(), "bool", "BOOLEAN", domain=(bool(node.this),))
        if isinstance(node, exp.Null):
            return Derived(exp.Null(), "null", "NULL", domain=())
        if isinstance(node, exp.Neg):
            a = self.arith.num(node.this)
            return self.arith.result(exp.Neg(this=operand(a.sql)), -a.hi, -a.lo, a.integral, a)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            return self.arith.binary(node)
        if isinstance(node, (exp.Div, exp.IntDiv)):
            return self.arith.divide(node)
        if isinstance(node, exp.Mod):
            return self.arith.modulo(node)
        if isinstance(node, exp.Abs):
            a = self.arith.num(node.this)
            lo, hi = a.range()
            nlo = Fraction(0) if lo <= 0 <= hi else min(abs(lo), abs(hi))
            return self.arith.result(exp.Abs(this=a.sql), nlo, max(abs(lo), abs(hi)), a.integral, a)
        if isinstance(node, (exp.Least, exp.Greatest)):
            return self.arith.extreme(node)
        if isinstance(node, (exp.Round, exp.Floor, exp.Ceil)):
            return self.arith.rounding(node)
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
            return self.dates.trunc(node)
        if isinstance(node, exp.Extract):
            return self.dates.extract(node)
        if isinstance(node, exp.WidthBucket):
            return self.arith.width_bucket(node)
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
            # (dpsql.analysis.grouping.Grouping._public_range) and clamps it like declared bounds
            span = self.public_range(ref)
            if span is not None:
                info = replace(info, bounds=span, integral=fam == "int" and all(b.denominator == 1 for b in span))
        if fam in NUMERIC:
            if not info.bounded:
                return Derived(col, "num", info.sql_type, refs=frozenset({ref}), column=(ref, info),
                               integral=fam == "int")
            lo, hi = info.range()
            whole = fam == "int" and info.whole_bounds
            clamped = clamp(col, lo, hi)
            real = self.dialect.real
            sql = exp.Cast(this=clamped, to=data_type("BIGINT" if whole else real))
            return Derived(sql, "num", "BIGINT" if whole else real, lo, hi, whole, refs=frozenset({ref}),
                           column=(ref, info), floating=float_type(info.sql_type))
        kind = {"text": "text", "bool": "bool", "date": "date", "timestamp": "timestamp"}.get(fam, "other")
        if kind == "date" and info.public and info.span is None and self.public_range is not None:
            # a public DATE column's first and last dates are public, read from the table itself
            # (grouping.Grouping._public_range); the clamp to them is then the identity on every row
            span = self.public_range(ref, "date")
            if span is not None:
                lo, hi = span
                return Derived(clamp_date(col, lo, hi), "date", "DATE", refs=frozenset({ref}), column=(ref, info),
                               span=(lo, hi))
        if kind == "date" and info.span is not None and date_bounds_problem(info.policy, info.sql_type) is None:
            lo, hi = info.span
            return Derived(clamp_date(col, lo, hi), "date", "DATE", refs=frozenset({ref}), column=(ref, info),
                           span=(lo, hi))
        if (kind == "timestamp" and info.span is not None and self.dialect.wall_clock_timestamps
                and date_bounds_problem(info.policy, info.sql_type) is None):
            lo, hi = info.policy.time_span
            # The clamp's comparisons meet TIMESTAMP constants (total: 'infinity', BC and year
            # 294276 order on DuckDB and PostgreSQL; a nanosecond column's bounds are within its
            # range, date_bounds_problem). The clamped value lies in years 1-9999 and is cast to
            # TIMESTAMP (microseconds): from TIMESTAMP_S/_MS/_NS or timestamp(p) that conversion
            # is total there, so the functions after it meet one type on every engine.
            sql = exp.Cast(this=clamp_date(col, lo, hi), to=data_type("TIMESTAMP"))
            return Derived(sql, "timestamp", "TIMESTAMP", refs=frozenset({ref}), column=(ref, info), span=(lo, hi))
        domain = info.domain
        if kind == "bool":
            domain = (False, True)
        return Derived(col, kind, info.sql_type, domain=tuple(domain) if domain is not None else None,
                       refs=frozenset({ref}), column=(ref, info))

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
            domain = tuple(ordered(set().union(*(set(p.domain) for p in parts))))
        if kind == "num":
            real = [p for p in parts if p.kind == "num"]
            if not all(p.bounded for p in real):
                raise QueryRejected("a branch without bounds", "every numeric branch needs declared bounds")
            integral = all(p.integral for p in real)
            lo, hi = min(p.lo for p in real), max(p.hi for p in real)
            if not integral:       # every branch the same SQL type: the dialect's real type
                if isinstance(sql, exp.Case):
                    for i, p in zip(sql.args.get("ifs") or [], real):
                        i.set("true", self.arith.in_type(p, False))
                    if sql.args.get("default") is not None:
                        sql.set("default", self.arith.in_type(real[-1], False))
                else:
                    sql = exp.Coalesce(this=self.arith.in_type(real[0], False), expressions=[self.arith.in_type(p, False) for p in real[1:]])
            out = self.arith.result(sql, lo, hi, integral, *real)
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
            return Derived(self.arith.in_type(a, False), "num", self.dialect.real, a.lo, a.hi, False, a.domain, a.refs,
                           floating=to.is_type(exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT))
        raise QueryRejected("CAST", "a cast can fail on some rows, and the error would reveal them")

def _refs(node: exp.Expression, resolve) -> frozenset[ColRef]:
    out = set()
    for c in node.find_all(exp.Column):
        try:
            out.add(resolve(c, "WHERE")[0])
        except QueryRejected:
            pass
    return frozenset(out)
