"""dpsql.analysis.sqltypes.family reads engine type names with sqlglot's DataType (dpsql.dialects.read_type):
the names DuckDB, PostgreSQL (format_type) and dpsql's Spark engine report, and the family each has. The
table also checks the reading against the name patterns it replaced (_PATTERN_FAMILY below, as they were):
the two agree on every name here, so no column changed family."""
from __future__ import annotations

import re

import pytest

from dpsql.analysis.sqltypes import family
from dpsql.dialects import read_type

DUCKDB = {
    "TINYINT": "int", "SMALLINT": "int", "INTEGER": "int", "BIGINT": "int", "HUGEINT": "int",
    "UTINYINT": "int", "USMALLINT": "int", "UINTEGER": "int", "UBIGINT": "int", "UHUGEINT": "int",
    "FLOAT": "float", "DOUBLE": "float", "DECIMAL(18,3)": "decimal", "DECIMAL(38,0)": "decimal",
    "DECIMAL(4,1)": "decimal",
    "VARCHAR": "text", "VARCHAR COLLATE NOCASE": "text", "VARCHAR COLLATE NOACCENT": "text", "BOOLEAN": "bool",
    "DATE": "date", "TIMESTAMP": "timestamp", "TIMESTAMP WITH TIME ZONE": "timestamp", "TIMESTAMP_S": "timestamp",
    "TIMESTAMP_MS": "timestamp", "TIMESTAMP_NS": "timestamp", "TIME": "other", "INTERVAL": "other", "BLOB": "other",
    "UUID": "other", "JSON": "other", "BIT": "other", "NULL": "other", "INTEGER[]": "int", "VARCHAR[]": "text",
    "INTEGER[3]": "int", "STRUCT(a INTEGER)": "other", "STRUCT(a INTEGER)[]": "other", "MAP(VARCHAR, INTEGER)": "other",
    "ENUM('a', 'b')": "other", "UNION(a INTEGER)": "other", "VARINT": "other",
}
POSTGRES = {
    "smallint": "int", "integer": "int", "bigint": "int", "int2": "int", "int4": "int", "int8": "int",
    "real": "float", "double precision": "float", "float4": "float", "float8": "float",
    "numeric": "decimal", "numeric(12,2)": "decimal", "numeric(1000,2)": "decimal",
    "text": "text", "character varying": "text", "character varying(10)": "text", "character(1)": "text",
    "bpchar": "text", 'text COLLATE "C"': "text", 'text COLLATE "en-x-icu"': "text",
    'character varying(10) COLLATE "de_DE"': "text", "boolean": "bool", "date": "date",
    "timestamp without time zone": "timestamp", "timestamp(3) without time zone": "timestamp",
    "timestamp with time zone": "timestamp", "timestamp(6) with time zone": "timestamp", "timestamptz": "timestamp",
    "time without time zone": "other", "time with time zone": "other", "interval": "other", "bytea": "other",
    "uuid": "other", "json": "other", "jsonb": "other", "bit(3)": "other", "bit varying(5)": "other", "inet": "other",
    "int4range": "other", "int8range": "other", "numrange": "other", "tsrange": "other", "tstzrange": "other",
    "daterange": "date", "integer[]": "int", "integer[][]": "int", "text[]": "text", "numeric(10,2)[]": "decimal",
    "date[]": "date", "boolean[]": "bool", "timestamp with time zone[]": "timestamp", "character varying(5)[]": "text",
    # sqlglot cannot read these: the name patterns decide (sqltypes._family_by_name)
    "xml": "other", "tsvector": "other", "point": "other", '"char"': "other", "name": "other", "citext": "other",
    "money": "other", "oid": "other", "regclass": "other",
    "cidr": "other", "macaddr": "other", "pg_lsn": "other", "varbit": "other", "serial": "int", "bigserial": "int",
}
SPARK = {   # dpsql.engines.spark._type_name
    "TINYINT": "int", "SMALLINT": "int", "INTEGER": "int", "BIGINT": "int", "FLOAT": "float", "DOUBLE": "float",
    "DECIMAL(10,0)": "decimal", "DECIMAL(38,18)": "decimal", "VARCHAR": "text", "BOOLEAN": "bool", "DATE": "date",
    "TIMESTAMP": "timestamp", "BLOB": "other", "NULL": "other", "ARRAY<INT>": "other", "MAP<STRING,INT>": "other",
    "STRUCT<A:INT,B:STRING>": "other", "BINARY": "other", "VOID": "other",
}
TABLE = {**DUCKDB, **POSTGRES, **SPARK}


def _pattern_family(sql_type: str) -> str:
    """The name patterns family() used before it read names with sqlglot."""
    t = sql_type.lower()
    if re.match(r"^(u?(tiny|small|big|huge)?int(eger)?|int[248]|smallint|bigint|u?hugeint|integer|serial|bigserial"
                r"|long|short|byte)\b", t):
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


@pytest.mark.parametrize("name", sorted(TABLE))
def test_family_of_engine_type_names(name):
    assert family(name) == TABLE[name]
    assert family(name) == _pattern_family(name), "reading the name changed its family"


def test_names_sqlglot_cannot_read_are_few_and_known():
    unread = {n for n in TABLE if read_type(n) is None}
    assert unread == {'"char"', "name", "citext", "money", "oid", "regclass", "cidr", "macaddr", "pg_lsn",
                      "varbit", "serial", "bigserial", "VARINT", "VOID", "xml", "tsvector", "point"}
