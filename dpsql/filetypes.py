"""Schemas that do not depend on the data: the declared column types of tables read from files.

The rule. Whatever an analyst can read without a charge must not depend on the value of any row.
An analyst reads a table's column names and types for free in many places: psql's `\\d` and the
emulated pg_catalog and information_schema of `dpsql serve`, the shell's `\\d` and DESCRIBE, the
DB-API `cursor.description` (the type of SUM(x) follows x's), EXPLAIN DP's rewritten SQL (its
casts), refusals that name a type ("SUM of a VARCHAR column"), even whether the policy loads
(bounds on a column that became VARCHAR are refused). Differential privacy bounds how much any
output may change when one person's data changes (Dwork & Roth 2014, Def. 2.4: by a factor e^epsilon
in probability, /work/shared/REFERENCES.md); an output that is a function of the rows and carries no
noise changes with probability 1, so if a type depended on one person's value, that free answer
would release it with epsilon = infinity, whatever the budget says.

Where types came from the values:

- CSV: DuckDB's sniffer (read_csv_auto) gives each column the narrowest type every sampled value
  reads as, so one person's `income` of `52000.5` turns BIGINT into DOUBLE and `N/A` turns it into
  VARCHAR; the dialect is guessed from the values too (a first field starting with `#` made the
  sniffer read that line as a comment and drop the row; delimiter and header are guesses).
- Parquet: a file's types are in its own metadata, written per file, not per row; but writers infer
  them from the values (pandas writes an integer column holding one missing value as float64), and
  over a glob DuckDB takes the first file's schema or widens over every file: in a layout of one file
  per person (or per day, with one person's rows in it) one person's file decides the type.

What dpsql does instead:

- The types are part of the policy: `[tables.NAME.types]` (`[public.types.NAME]` for a public
  table) lists the columns the table has, in order, each with its type from FILE_TYPE_NAMES below.
  `dpsql init FILE` writes that list (dpsql.starter). The data owner runs init, so reading values
  there is the owner reading their own data, and what it writes is a policy the owner reviews, not
  an answer; for CSV it keeps the type DuckDB infers only when every value of the column reads as
  that type, else VARCHAR (dpsql.engines.duckdb.file_columns).
- The engine reads each file once, when it opens, in a way no value can steer
  (dpsql.engines.duckdb): CSV in a fixed dialect (a header line; comma-separated for .csv, tab for
  .tsv; RFC 4180 quotes; no comment or skipped lines) with every field as text, Parquet with the
  files' columns matched by name; then each declared column is TRY_CAST to its declared type, so a
  value that does not read as its type becomes NULL (a value one person can have anyway, handled
  by every aggregate) and the row stays. A column of the file the policy does not list is not
  loaded: it is neither shown nor queried. The loaded table's columns, their order and types (and
  its lack of constraints) are therefore a function of the policy alone. What can still depend on
  the file is whether it opens at all (a header without a declared column, a malformed line, a
  glob whose files' types cannot be widened): the engine then refuses to open, which only the owner
  starting it sees, before any analyst is served.
- A policy under which an analyst could see a table loaded from a file without declared types
  (protected, or public) is refused when the schema is read (dpsql.sources.read_schema), with the
  key to add and the `dpsql init` command that writes it. Reading undeclared columns as VARCHAR
  would be as safe, but leaves every numeric column unusable (bounds on VARCHAR are refused) with a
  message about types rather than about the missing declaration; refusing says what to do.
- Declared types of a table not read from a file (a DuckDB or PostgreSQL table) are not used: there
  the database's own DDL is the owner's declaration.

What was already free of values, and is checked by tests/integration/test_data_independent_schema.py:
the emulated catalog has no statistics (reltuples -1, relpages 0; pg_stats and pg_stat_* are
refused: dpsql.frontends.pgwire.catalog); EXPLAIN and EXPLAIN ANALYZE are refused before any engine
sees them (dpsql.analysis.parse), and EXPLAIN DP shows no cardinality; DuckDB's catalog functions
(duckdb_tables().estimated_size, duckdb_columns()) and PostgreSQL's catalog (pg_class.reltuples,
pg_stats, pg_stat_user_tables) are no table a policy can name, so a query on them is refused like any
undeclared table. JSON: no reader is reachable (file targets and sources are .csv, .tsv and
.parquet; read_json in a query is refused like read_csv, and file access is off after loading).
"""
from __future__ import annotations

import re

from dpsql.errors import InterfaceError

FileTypes = tuple[tuple[str, str], ...]     # (column, type) in the order declared

# Each spelling a policy may use -> the name DuckDB reports for it. Scalar types only.
FILE_TYPE_NAMES = {
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT", "INT1": "TINYINT", "SMALLINT": "SMALLINT", "INT2": "SMALLINT",
    "INTEGER": "INTEGER", "INT": "INTEGER", "INT4": "INTEGER", "BIGINT": "BIGINT", "INT8": "BIGINT",
    "HUGEINT": "HUGEINT", "UTINYINT": "UTINYINT", "USMALLINT": "USMALLINT", "UINTEGER": "UINTEGER",
    "UBIGINT": "UBIGINT",
    "FLOAT": "FLOAT", "FLOAT4": "FLOAT", "REAL": "FLOAT", "DOUBLE": "DOUBLE", "FLOAT8": "DOUBLE",
    "DOUBLE PRECISION": "DOUBLE",
    "VARCHAR": "VARCHAR", "TEXT": "VARCHAR", "STRING": "VARCHAR",
    "DATE": "DATE", "TIME": "TIME", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
    "TIMESTAMP_S": "TIMESTAMP", "TIMESTAMP_MS": "TIMESTAMP", "TIMESTAMP_NS": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP WITH TIME ZONE",
    "UUID": "UUID",
}
_DECIMAL = re.compile(r"^(?:DECIMAL|NUMERIC)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")


def file_type(sql_type: str) -> str | None:
    """The name DuckDB reports for a type a file table may declare, or None if it may not
    (`int8` -> BIGINT, `numeric(10, 2)` -> DECIMAL(10,2), `INTEGER[]` -> None). The result is
    safe to write into SQL as it is."""
    t = " ".join(sql_type.upper().split())
    if t in FILE_TYPE_NAMES:
        return FILE_TYPE_NAMES[t]
    m = _DECIMAL.match(t)
    if m is None:
        return None
    width, scale = int(m.group(1) or 18), int(m.group(2) or (0 if m.group(1) else 3))
    return f"DECIMAL({width},{scale})" if 1 <= width <= 38 and scale <= width else None


def file_column(source: str, names: dict[str, str], column: str) -> str:
    """The file's own spelling of a declared column (names: the file's columns by lower-case
    name), or the error the owner sees when the file lacks it (the engines read files alike)."""
    if column.lower() not in names:
        raise InterfaceError(f"{source!r} has no column {column!r}, which the policy declares "
                             f"(its columns: {', '.join(sorted(names))})")
    return names[column.lower()]
