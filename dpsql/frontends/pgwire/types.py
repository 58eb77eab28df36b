"""PostgreSQL type OIDs for dpsql's result columns.

The Session reports each column's SQL type name as the engine spells it (DuckDB: BIGINT,
DOUBLE, VARCHAR, DECIMAL(18,3), TIMESTAMP WITH TIME ZONE, ...; PostgreSQL: bigint, double
precision, character varying, numeric, ...). Clients decode rows by the OID in RowDescription,
so the mapping must name a built-in type (drivers then need no type introspection).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


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
    name = re.sub(r"\s*\(.*\)\s*$", "", sql_type.strip().lower())   # DECIMAL(18,3) -> decimal
    return _BY_NAME.get(name, TEXT)
