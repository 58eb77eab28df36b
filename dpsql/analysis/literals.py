"""Literals in row conditions: their syntax (NUMBER, DATE_TEXT), their type (literal_type), whether
they may meet a column (compatible), and how they are written against it (literal_sql, date_text) so
that the comparison cannot fail on any row.
"""
from __future__ import annotations

import datetime as _dt
import math
import re

from sqlglot import exp

from dpsql.analysis.sqltypes import family, nanosecond
from dpsql.analysis.subset import refuse_expression
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import QueryRejected

LITERAL_LIMIT = 1e18
NUMBER = re.compile(r"\d{1,19}(\.\d{0,18})?|\.\d{1,18}|\d+(\.\d*)?[eE][+-]?\d{1,3}")
DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")

_TIMESTAMPS = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ,
               exp.DataType.Type.DATETIME)


def date_text(node: exp.Expression, column_type: str) -> exp.Expression:
    """A string literal compared with a DATE (or TIMESTAMP) column, as PostgreSQL reads it: a
    date constant. Only a text that is a valid date written YYYY-MM-DD is admitted, checked
    here in Python, and it becomes a DATE literal (the constant is converted, never the
    column: no row can make the comparison fail); any other text is refused with the fix."""
    if not (isinstance(node, exp.Literal) and node.is_string) or family(column_type) not in ("date", "timestamp"):
        return node
    text = node.this
    if DATE_TEXT.fullmatch(text):
        try:
            _dt.date.fromisoformat(text)
            return exp.Cast(this=exp.Literal.string(text), to=data_type("DATE"))
        except ValueError:
            pass
    kind = "DATE" if family(column_type) == "date" else "TIMESTAMP"
    raise QueryRejected(f"comparing a {kind} column with a string that is not a date",
                        "converting the string could fail, and dpsql converts only valid dates",
                        "write the date as DATE 'YYYY-MM-DD', e.g. DATE '2024-01-31'"
                        + (", or a time as TIMESTAMP 'YYYY-MM-DD HH:MM:SS'" if kind == "TIMESTAMP" else ""))


def literal_sql(node: exp.Expression, column_type: str | None, dialect: EngineDialect) -> exp.Expression:
    """A literal compared with a column of column_type, written so that the comparison
    cannot fail on any row.

    Numbers: see EngineDialect.exact_literals and the cases below. Integral literals are below 1e18
    (literal_type), inside every engine's BIGINT. Dates and times: a DATE literal may meet a
    DATE or TIMESTAMP column (the constant is converted, never the column); a TIMESTAMP
    literal only a TIMESTAMP column (compatible). A column of nanosecond precision holds
    only 1677-09-21..2262-04-11: a literal outside it is refused here (the engine would fail
    converting it, whether or not rows exist)."""
    lit = node.this if isinstance(node, exp.Neg) else node
    if isinstance(lit, exp.Literal) and not lit.is_string:
        if dialect.exact_literals:
            if column_type is not None and family(column_type) == "float":
                # PostgreSQL converts a NUMERIC literal to the float column's type (real in an
                # IN list, double precision in `=`), and that conversion fails for a literal
                # beyond the type's range (1e-400, 1e-50 as real) on every run. Python's float
                # of an admitted literal cannot fail (finite, |x| <= 1e18; tiny ones round to a
                # subnormal or 0), and double precision holds it: the column then meets a
                # double precision constant, and widening a real to it is total.
                value = -float(lit.this) if isinstance(node, exp.Neg) else float(lit.this)
                return exp.Cast(this=exp.Literal.number(repr(value)), to=data_type("DOUBLE"))
            return node.copy()
        integral = re.fullmatch(r"\d+", lit.this) is not None
        # An integer column meets an integral literal in a common integer type, except that no
        # integer type holds both a UHUGEINT and a negative number: DuckDB then converts the
        # column to HUGEINT, which fails on every value above 2**127. A negative literal
        # against an unsigned column is therefore a DOUBLE too (every UHUGEINT converts to one).
        unsigned_negative = isinstance(node, exp.Neg) and column_type is not None \
            and column_type.strip().lower().startswith("u")
        if not (integral and column_type is not None and family(column_type) == "int") or unsigned_negative:
            value = -float(lit.this) if isinstance(node, exp.Neg) else float(lit.this)
            return exp.Cast(this=exp.Literal.number(repr(value)), to=data_type("DOUBLE"))
    if (dialect.ntz_timestamp_literals and isinstance(node, exp.Cast)
            and isinstance(node.this, exp.Literal) and node.to.this in _TIMESTAMPS):
        # A TIMESTAMP literal (Spark: in the session's time zone) meeting a TIMESTAMP_NTZ column
        # makes Spark convert the column to TIMESTAMP, row by row, which overflows west of UTC
        # on its largest values. Written as TIMESTAMP_NTZ, the literal meets an NTZ column as it
        # is, and a TIMESTAMP column by its own conversion to TIMESTAMP in the session's zone,
        # which is what the TIMESTAMP literal meant (a constant of years 1-9999: in range).
        return exp.Cast(this=node.this.copy(), to=data_type("TIMESTAMPNTZ"))
    if (isinstance(node, exp.Cast) and column_type is not None and family(column_type) == "timestamp"
            and nanosecond(column_type) and isinstance(node.this, exp.Literal)):
        year = int(node.this.this[:4])
        if not 1678 <= year <= 2261:
            raise QueryRejected(f"a date or time literal outside {column_type}'s range",
                                "the column holds only 1678-2261 at nanosecond precision")
    return node.copy()

def literal_type(node: exp.Expression, where: str) -> str:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        node = node.this
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Boolean):
        return "lit:bool"
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "lit:text"
        if not NUMBER.fullmatch(node.this):
            raise QueryRejected("a numeric literal with more than 19 integer or 18 decimal digits",
                                "comparing it could make the engine overflow on some rows")
        v = float(node.this)
        if not math.isfinite(v) or abs(v) > LITERAL_LIMIT:
            raise QueryRejected("a numeric literal beyond 1e18", "it could overflow the column's type")
        return "lit:num"
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        target = node.to.this
        text = node.this.this
        try:
            if target == exp.DataType.Type.DATE and DATE_TEXT.fullmatch(text):
                _dt.date.fromisoformat(text)
                return "lit:date"
            if target in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMPNTZ,
                          exp.DataType.Type.TIMESTAMPTZ) and _TIMESTAMP.fullmatch(text):
                _dt.datetime.fromisoformat(text)
                return "lit:timestamp"
        except ValueError:
            pass
        raise QueryRejected("a malformed date literal",
                            "write dates as DATE 'YYYY-MM-DD' and timestamps as TIMESTAMP 'YYYY-MM-DD HH:MM:SS'")
    raise refuse_expression(node, where)

def compatible(a: str | None, b: str | None) -> None:
    """Refuse comparisons between operands whose types the engine would reconcile by a
    conversion that can fail on some values (see literal_sql and Predicates.column_pair_cast)."""
    fa = "null" if a == "null" else (a[4:] if a and a.startswith("lit:") else family(a or "other"))
    fb = "null" if b == "null" else (b[4:] if b and b.startswith("lit:") else family(b or "other"))
    groups = {"int": "num", "float": "num", "decimal": "num", "num": "num", "text": "text",
              "bool": "bool", "date": "date", "timestamp": "timestamp", "null": "null"}
    ga, gb = groups.get(fa, "other"), groups.get(fb, "other")
    if "other" in (ga, gb):
        raise QueryRejected("a comparison on a column of an unsupported type",
                            "only numeric, text, boolean, date and timestamp columns can be filtered")
    if ga != gb and "null" not in (ga, gb):
        column_is_a = not (a or "").startswith("lit:")
        col_group, lit_kind = (ga, b) if column_is_a else (gb, a)
        if not (col_group == "timestamp" and lit_kind == "lit:date"):
            hint = ("write the date as DATE 'YYYY-MM-DD', e.g. DATE '2024-01-31'" if col_group == "date"
                    else "compare values of the same type")
            raise QueryRejected(f"comparing {ga} with {gb}", "the implicit cast could fail on some rows", hint)

