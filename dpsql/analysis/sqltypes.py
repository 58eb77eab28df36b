"""Engine type names, read coarsely: the family of a column's type, its zone and precision, whether
two columns have one type, and whether a column's declared date bounds fit its type. Also the rule
that one expression context reads at most one explicit collation (one_collation, tracking).
"""
from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import exp

from dpsql.dialects import read_type
from dpsql.errors import QueryRejected
from dpsql.sqltext import collation

NUMERIC = {"int", "float", "decimal"}


_FAMILIES: dict[exp.DataType.Type, str] = {
    getattr(exp.DataType.Type, name): fam for fam, names in {
        "int": ("TINYINT", "SMALLINT", "INT", "BIGINT", "INT128", "UTINYINT", "USMALLINT", "UINT", "UBIGINT",
                "UINT128"),
        "decimal": ("DECIMAL",),
        "float": ("FLOAT", "DOUBLE"),
        "text": ("CHAR", "VARCHAR", "TEXT", "BPCHAR"),
        "bool": ("BOOLEAN",),
        # PostgreSQL's daterange and datemultirange: date, as the name patterns this replaced read them
        "date": ("DATE", "DATERANGE", "DATEMULTIRANGE"),
        "timestamp": ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPNTZ", "TIMESTAMPLTZ", "TIMESTAMP_S", "TIMESTAMP_MS",
                      "TIMESTAMP_NS", "DATETIME"),
    }.items() for name in names}


@lru_cache(maxsize=4096)
def family(sql_type: str) -> str:
    """Coarse type family of an engine type name: int, float, decimal, text, bool, date, timestamp,
    other. The name is read by sqlglot (dpsql.dialects.read_type); an array written `x[]` reads as
    x's family, as the name patterns this replaced read it. Names sqlglot cannot read (PostgreSQL's
    serial, citext, money, oid; SQL Server's datetime2) keep those patterns (_family_by_name).
    tests/analysis/test_type_family.py holds the engines' names and their families."""
    dt = read_type(sql_type)
    if dt is None:
        return _family_by_name(sql_type)
    while dt.this == exp.DataType.Type.ARRAY and dt.expressions and sql_type.rstrip().endswith("]"):
        dt = dt.expressions[0]
    return _FAMILIES.get(dt.this, "other")


def _family_by_name(sql_type: str) -> str:
    """family() of a name sqlglot cannot read, by its spelling."""
    t = sql_type.lower()
    if re.match(r"^(u?(tiny|small|big|huge)?int(eger)?|int[248]|smallint|bigint|u?hugeint|integer|serial|bigserial|long|short|byte)\b", t):
        return "int"
    if t.startswith(("decimal", "numeric")):
        return "decimal"
    if t.startswith(("double", "float", "real")):
        return "float"
    if t.startswith(("varchar", "text", "char", "character", "string", "bpchar")):
        return "text"
    if t.startswith(("bool",)):
        return "bool"
    if t.startswith(("date",)) and not t.startswith("datetime"):
        return "date"
    if t.startswith(("timestamp", "datetime")):
        return "timestamp"
    return "other"


def one_collation(seen: dict[str, str], info) -> None:
    """Note a column's explicit collation (info: a ColumnInfo); refuse a second, different one.

    PostgreSQL cannot compare, sort, hash or combine text of two different implicit collations,
    and it says so ("could not determine which collation to use") only when rows reach the
    expression: the same query would fail on a table with rows and succeed on an empty one, or on
    a join that matches no row, an error that depends on the data. So the columns one
    expression context reads carry at most one explicit collation (any number of columns with the
    database's default collation may meet it: the explicit one wins, without error). An
    expression context is one GROUP BY or SELECT expression, one WHERE (all of it: `a = 'x' AND
    b = 'y'` is refused too, though the two never meet), one FILTER, one join's ON."""
    c = collation(info.sql_type)
    if c is None:
        return
    seen.setdefault(c, info.name)
    if len(seen) > 1:
        (c1, n1), (c2, n2) = list(seen.items())[:2]
        raise QueryRejected(f"reading {n1!r} (collation {c1}) and {n2!r} (collation {c2}) together",
                            "PostgreSQL cannot compare or combine text of two collations, and it reports "
                            "that only when rows meet, so the error would depend on the data",
                            "ask the data owner for a view that gives these columns one collation")


def tracking(resolve):
    """resolve, refusing a second explicit collation among the columns it names (one_collation)."""
    seen: dict[str, str] = {}

    def tracked(col, where):
        ref, info = resolve(col, where)
        one_collation(seen, info)
        return ref, info
    return tracked


def nanosecond(sql_type: str) -> bool:
    """A timestamp type of nanosecond precision (DuckDB's TIMESTAMP_NS; TIMESTAMP(9) elsewhere)."""
    t = sql_type.lower().replace(" ", "")
    return t.startswith("timestamp_ns") or t.startswith("timestamp(9)")


def zoned(sql_type: str) -> bool:
    """A timestamp type with a time zone (PostgreSQL's timestamptz, DuckDB's TIMESTAMP WITH TIME
    ZONE): its dates and hours are those of the session's time zone."""
    t = " ".join(sql_type.lower().split())
    return t.startswith("timestamptz") or ("with time zone" in t and "without time zone" not in t)


def date_bounds_problem(column, sql_type: str) -> str | None:
    """Why a column's declared date bounds (ColumnPolicy.span) do not fit its engine type, or None.
    DATE: dates only. TIMESTAMP without time zone: dates or local date-times (a nanosecond one only
    within the years it holds, 1678-2261). Zoned timestamps take none: clamping and date functions
    there would depend on the session's time zone."""
    fam = family(sql_type)
    if fam == "date":
        return "a DATE column's bounds are dates (2023-01-01), not date-times" if column.timed else None
    if fam != "timestamp":
        return "date bounds given but the column is not a DATE or TIMESTAMP"
    if zoned(sql_type):
        return ("bounds of a TIMESTAMP WITH TIME ZONE column are not supported: its dates and hours depend on "
                "the session's time zone")
    lo, hi = column.time_span
    if nanosecond(sql_type) and not (1678 <= lo.year and hi.year <= 2261):
        return "a nanosecond TIMESTAMP holds only the years 1678-2261: give bounds within them"
    return None


def same_type(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())



def float_type(sql_type: str) -> bool:
    """A double precision or real column (PostgreSQL's float types; DuckDB's DOUBLE, FLOAT)."""
    t = sql_type.upper()
    return t.startswith(("DOUBLE", "FLOAT", "REAL")) or t in ("FLOAT4", "FLOAT8")
