"""PostgreSQL type OIDs for dpsql's result columns.

The Session reports each column's SQL type name as the engine spells it (DuckDB: BIGINT,
DOUBLE, VARCHAR, DECIMAL(18,3), TIMESTAMP WITH TIME ZONE, ...; PostgreSQL: bigint, double
precision, character varying, numeric, ...). Clients decode rows by the OID in RowDescription,
so the mapping must name a built-in type (drivers then need no type introspection).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from dpsql.sqltext import bare_type, skip


@dataclass(frozen=True, slots=True)
class PgType:
    oid: int
    name: str        # pg_type.typname
    size: int        # typlen: -1 for variable length


BOOL = PgType(16, "bool", 1)
BYTEA = PgType(17, "bytea", -1)
NAME = PgType(19, "name", 64)
INT8 = PgType(20, "int8", 8)
INT2 = PgType(21, "int2", 2)
INT4 = PgType(23, "int4", 4)
TEXT = PgType(25, "text", -1)
OID = PgType(26, "oid", 4)
FLOAT4 = PgType(700, "float4", 4)
FLOAT8 = PgType(701, "float8", 8)
VARCHAR = PgType(1043, "varchar", -1)
DATE = PgType(1082, "date", 4)
TIME = PgType(1083, "time", 8)
TIMESTAMP = PgType(1114, "timestamp", 8)
TIMESTAMPTZ = PgType(1184, "timestamptz", 8)
INTERVAL = PgType(1186, "interval", 16)
NUMERIC = PgType(1700, "numeric", -1)
UUID = PgType(2950, "uuid", 16)

BUILTIN = {t.oid: t for t in (BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID, FLOAT4, FLOAT8, VARCHAR, DATE,
                              TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC, UUID)}

_BY_NAME = {
    "boolean": BOOL, "bool": BOOL,
    "blob": BYTEA, "bytea": BYTEA,
    "tinyint": INT2, "smallint": INT2, "int2": INT2, "utinyint": INT2,
    "integer": INT4, "int": INT4, "int4": INT4, "usmallint": INT4,
    "bigint": INT8, "int8": INT8, "uinteger": INT8,
    "hugeint": NUMERIC, "ubigint": NUMERIC, "uhugeint": NUMERIC,
    "real": FLOAT4, "float4": FLOAT4, "float": FLOAT8,
    "double": FLOAT8, "double precision": FLOAT8, "float8": FLOAT8,
    "decimal": NUMERIC, "numeric": NUMERIC,
    "varchar": VARCHAR, "character varying": VARCHAR, "string": VARCHAR,
    "text": TEXT, "char": TEXT, "character": TEXT, "bpchar": TEXT, "name": NAME,
    "date": DATE, "time": TIME, "time without time zone": TIME,
    "timestamp": TIMESTAMP, "timestamp without time zone": TIMESTAMP, "datetime": TIMESTAMP,
    "timestamp with time zone": TIMESTAMPTZ, "timestamptz": TIMESTAMPTZ,
    "interval": INTERVAL, "uuid": UUID, "oid": OID,
}


def pg_type(sql_type: str | None) -> PgType:
    """The built-in PostgreSQL type for an engine's type name; text for anything unknown."""
    if not sql_type:
        return TEXT
    name = re.sub(r"\s*\(.*\)\s*$", "", bare_type(sql_type).strip().lower())   # DECIMAL(18,3) -> decimal
    return _BY_NAME.get(name, TEXT)


# -- parameter types for Describe (statement) ---------------------------------------------------------

_PARAM = re.compile(r"\$(\d+)")


def param_count(sql: str) -> int:
    """The highest $n placeholder outside quotes and comments (0 if none)."""
    n, i, top = len(sql), 0, 0
    while i < n:
        c = sql[i]
        if c == "$" and (m := _PARAM.match(sql, i)):
            top = max(top, int(m.group(1)))
            i = m.end()
            continue
        if c in "'\"-/$":
            kind, end, _ = skip(sql, i)
            if kind != "code":
                i = end
                continue
        i += 1
    return top


def infer_param_oids(sql: str, declared: list[int] | tuple[int, ...], tables: dict[str, dict[str, str]]) -> list[int]:
    """Each $n's type OID: the one Parse declared, else the type of the column it is compared
    with (`age > $1` -> age's type), else int8 for LIMIT/OFFSET, else text.

    Drivers such as asyncpg send parameters in the types Describe reports, so a number compared
    with a numeric column must be described as a number."""
    count = max(param_count(sql), len(declared))
    oids = [declared[i] if i < len(declared) else 0 for i in range(count)]
    if all(oids):
        return oids
    guessed: dict[int, int] = {}
    try:
        guessed = _guess(sql, tables)
    except Exception:   # sqlglot cannot read it: the Session will say why at Execute
        guessed = {}
    return [o or guessed.get(i + 1, TEXT.oid) for i, o in enumerate(oids)]


def _guess(sql: str, tables: dict[str, dict[str, str]]) -> dict[int, int]:
    tree = sqlglot.parse_one(sql, read="postgres")
    used = {t.name.lower() for t in tree.find_all(exp.Table)}
    columns: dict[str, str] = {}
    for name, cols in tables.items():
        if name.lower() in used or not used:
            for c, t in cols.items():
                columns.setdefault(c.lower(), t)
    out: dict[int, int] = {}
    for ph in tree.find_all(exp.Placeholder, exp.Parameter):
        name = ph.args.get("this")
        name = name.name if isinstance(name, exp.Expression) else str(name or "")
        if not name.isdigit():
            continue
        oid = _placeholder_type(ph, columns)
        if oid is not None:
            out.setdefault(int(name), oid)
    return out


def _placeholder_type(ph, columns: dict[str, str]) -> int | None:
    node, parent = ph, ph.parent
    while isinstance(parent, (exp.Paren, exp.Cast, exp.Neg)):
        if isinstance(parent, exp.Cast):
            return pg_type(parent.to.sql(dialect="postgres")).oid
        node, parent = parent, parent.parent
    if isinstance(parent, (exp.Limit, exp.Offset)):
        return INT8.oid
    other = None
    if isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)):
        other = parent.right if parent.left is node else parent.left
    elif isinstance(parent, (exp.Between, exp.In)):
        other = parent.this
    if isinstance(other, exp.Column):
        t = columns.get(other.name.lower())
        if t is not None:
            return pg_type(t).oid
    return None


_PARAM_CAST = re.compile(r"\$(\d+)::\s*([A-Za-z_]\w*(?:\s+precision|\s+varying|\s+with(?:out)?\s+time\s+zone)?"
                         r"(?:\s*\(\s*\d+(?:\s*,\s*\d+)?\s*\))?)(?![\w.\[]|\s*\[)", re.IGNORECASE)


def _rewrite_code(sql: str, at_dollar) -> str:
    """Copy `sql`, calling `at_dollar(sql, i)` at each `$` outside quotes and comments; it returns
    (replacement, end) to substitute sql[i:end], or None to keep the `$`."""
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "$" and (hit := at_dollar(sql, i)) is not None:
            out.append(hit[0])
            i = hit[1]
            continue
        if c in "'\"-/$":
            kind, end, _ = skip(sql, i)
            if kind != "code":
                out.append(sql[i:end])
                i = end
                continue
        out.append(c)
        i += 1
    return "".join(out)


def strip_param_casts(sql: str) -> tuple[str, dict[int, int]]:
    """`$1::INTEGER` -> `$1`, with parameter 1 typed int4 (SQLAlchemy and others write such casts).

    The cast applies to the parameter alone, and the proxy decodes the value into that type before
    the Session binds it as a literal, so dropping it keeps the meaning. Only casts to built-in types
    are dropped; anything else is left for the Session to judge. Quotes and comments are untouched."""
    if "::" not in sql:
        return sql, {}
    types: dict[int, int] = {}

    def cast(text: str, i: int):
        m = _PARAM_CAST.match(text, i)
        if m is None:
            return None
        name = m.group(2).strip()
        t = pg_type(name)
        if t is TEXT and name.lower() not in ("text", "varchar", "character varying"):
            return None
        num = int(m.group(1))
        types.setdefault(num, t.oid)
        return f"${num}", m.end()

    return _rewrite_code(sql, cast), types


def named_params(sql: str) -> str:
    """`$1` -> `:p1` outside quotes and comments. The Session binds `:name` placeholders from a
    mapping in every engine dialect (sqlglot reads `$1` as a placeholder for DuckDB only)."""
    if "$" not in sql:
        return sql

    def name(text: str, i: int):
        m = _PARAM.match(text, i)
        if m is None or (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            return None
        return f":p{int(m.group(1))}", m.end()

    return _rewrite_code(sql, name)
