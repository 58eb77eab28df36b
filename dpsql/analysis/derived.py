"""What the analysis knows of one row expression (Derived), and the small facts about literals and
operands that the derivations share (dpsql.analysis.expressions has the argument).
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.analysis.literals import NUMBER
from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.errors import QueryRejected

MAX_DOMAIN = 10_000          # values a derived domain may have; beyond, the key is thresholded


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


def literal_whole(node: exp.Expression) -> bool:
    """Is this numeric literal an integer by PostgreSQL's typing? `10` is an integer (int4/int8),
    `10.0`, `1e1` and integers beyond int8 are numeric: `age / 10.0` divides exactly, `age / 10`
    truncates. The type comes from how the literal is written, never from its value."""
    while isinstance(node, (exp.Neg, exp.Paren)):
        node = node.this
    return (isinstance(node, exp.Literal) and not node.is_string and _WHOLE_LITERAL.fullmatch(node.this) is not None
            and int(node.this) < 2 ** 63)


def operand(sql: exp.Expression) -> exp.Expression:
    """An operand of an operator, parenthesised when it is itself an operation: sqlglot writes a
    tree as it stands, so `a * (1 - b)` built as Mul(a, Sub(1, b)) without a Paren would be read
    back by the engine as `a * 1 - b`."""
    if isinstance(sql, (exp.Binary, exp.Unary)) and not isinstance(sql, exp.Paren):
        return exp.Paren(this=sql)
    return sql


def literal_number(node: exp.Expression) -> Fraction | None:
    neg = isinstance(node, exp.Neg)
    lit = node.this if neg else node
    if isinstance(lit, exp.Paren):
        return literal_number(lit.this) if not neg else (None if literal_number(lit.this) is None
                                                        else -literal_number(lit.this))
    if isinstance(lit, exp.Literal) and not lit.is_string:
        if not NUMBER.fullmatch(lit.this):
            raise QueryRejected("a malformed number", "write numbers in plain decimal form")
        v = Fraction(lit.this)
        return -v if neg else v
    return None


def with_domain(d: Derived, values: set) -> Derived:
    if len(values) > MAX_DOMAIN:
        return d
    return Derived(d.sql, d.kind, d.sql_type, d.lo, d.hi, d.integral, tuple(ordered(values)), d.refs)


def ordered(values: set) -> list:
    return sorted(values, key=lambda v: (v is None, type(v).__name__, v if not isinstance(v, bool) else int(v)))
