"""`dpsql init FILE` and `dpsql init DATABASE --table T`: a starter policy from a CSV or Parquet
file's schema, or from the catalog of a DuckDB or PostgreSQL database's tables.

Only the file's column names and types go into the policy; never a value: no minimum or maximum
(bounds learnt from the data would tell an analyst the extremes, which may be one person's), no
list of distinct values (a rare value may be one person's). Bounds and value lists must come from
what is public about the domain. Every declaration is written commented out, so the user decides
what to expose; with one privacy_unit line uncommented the file is a valid policy.

For a file, init also writes the table's `types`, uncommented: the column types dpsql reads the
file with, so that no type an analyst sees depends on a value at query time (dpsql.filetypes).
The owner runs init, so its reading of the values (a CSV column keeps DuckDB's inferred type only
if every value reads as it, else VARCHAR: dpsql.engines.duckdb.file_columns) is the owner's.
"""
from __future__ import annotations

import re
import shlex

from dpsql.engines import open_engine
from dpsql.engines.duckdb import file_columns, file_table_name, is_file_target
from dpsql.errors import InterfaceError
from dpsql.filetypes import file_type

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_NUMERIC = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|U\w*INT|FLOAT|DOUBLE|DOUBLE PRECISION|REAL|"
                      r"DECIMAL.*|NUMERIC.*)$", re.IGNORECASE)


def _key(name: str) -> str:
    return name if _BARE.fullmatch(name) else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _hint(sql_type: str) -> str:
    t = sql_type.upper()
    if _NUMERIC.match(t):
        return "number: for SUM/AVG give public bounds { lower = L, upper = U }"
    if t == "DATE":
        return "date: bounds are dates, { lower = 2000-01-01, upper = 2030-12-31 }"
    if t.startswith("TIMESTAMP"):
        return "timestamp: filter only for now"
    if t == "BOOLEAN":
        return "boolean: GROUP BY it with { values = [...] } only if stored as text"
    return 'text: to GROUP BY it without a noisy threshold list its public keys { values = ["a", "b"] }'


def is_file(target: str) -> bool:
    """Whether `dpsql init` reads `target` as a CSV/TSV/Parquet file (else: a database)."""
    return is_file_target(target)


def table_name(path: str) -> str:
    """The table a file becomes (its stem; a glob's directory name)."""
    return file_table_name(path)


def starter_policy(path: str) -> str:
    """The text of a starter policy for the CSV or Parquet file at `path`."""
    if not is_file_target(path):
        raise InterfaceError(f"{path!r} is not a .csv, .tsv or .parquet file")
    table = file_table_name(path)
    return _policy_text(path, {table: file_columns(path)}, file=True)


def database_starter_policy(target: str, tables: list[str]) -> str:
    """The text of a starter policy for `tables` of a database (a DuckDB file or a PostgreSQL
    URL): their column names and types from the catalog, nothing from the rows."""
    if not tables:
        raise InterfaceError("name the tables to protect: dpsql init DATABASE --table people --table visits "
                             "(or give a .csv, .tsv or .parquet file)")
    try:
        engine = open_engine(target)
    except InterfaceError:
        raise
    except Exception as err:  # noqa: BLE001 - not a database dpsql can open: say so, no traceback
        raise InterfaceError(f"cannot open {target!r} as a database: {err}") from None
    try:
        columns = {}
        for t in tables:
            try:
                columns[t] = list(engine.table_columns(t).items())
            except KeyError:
                raise InterfaceError(f"the database has no table {t!r}") from None
    finally:
        engine.close()
    return _policy_text(target, columns, file=False)


def _policy_text(target: str, tables: dict[str, list[tuple[str, str]]], *, file: bool) -> str:
    stem = next(iter(tables)) if file else "policy"
    first = next(iter(tables))
    width = max([len(_key(c)) for cols in tables.values() for c, _ in cols] + [10])
    what = "the file's" if file else "the database catalog's"
    out = [
        f"# dpsql starter policy for {target}, written by `dpsql init` from {what}",
        "# schema: column names and types only. No value of the data was read into this file: no",
        "# minimum, maximum or list of distinct values, since those can be one person's. Take bounds",
        "# and value lists from what is public about each column's domain, not from the data.",
        "#",
        "# Next: uncomment ONE privacy_unit line per table and the columns analysts may use, then check:",
        f"#   dpsql policy check {stem}.toml --database {shlex.quote(target)}",
        f'#   dpsql query {shlex.quote(target)} "SELECT COUNT(*) FROM {first}" --policy {stem}.toml --analyst alice',
        "",
        "# Each analyst's lifetime budget. Every query spends some of it (default: epsilon 0.1 a query",
        "# under zCDP accounting); when it is used up, that analyst gets no more answers.",
        "[budget]",
        "epsilon = 1.0",
        "delta = 1e-6       # below 1/(number of people); allows GROUP BY keys not listed as values",
        '# ledger = "spending.sqlite"   # where spending is recorded (default: beside this file)',
    ]
    for table, columns in tables.items():
        out += [
            "",
            f"[tables.{_key(table)}]",
        ]
        if file:
            out.append(f'# source = "{target}"   # only when the database is not this file itself (a path or glob)')
        out += [
            "# privacy_unit: the column that identifies one person (or whatever one protected unit is:",
            "# a household, a customer). Every query bounds what one unit contributes; one unit's rows",
            "# are what the noise hides. Uncomment exactly one (and do not declare it under columns):",
        ]
        for name, sql_type in columns:
            out.append(f'# privacy_unit = "{name}"{" " * max(1, width - len(name))}# {sql_type}')
        out += [
            "max_rows_per_unit = 1      # rows one unit may have here; rows beyond it are dropped before aggregating",
            "max_groups_per_unit = 1    # groups of a GROUP BY one unit may add to",
            "",
            f"[tables.{_key(table)}.columns]",
            "# The only columns a query may use; a column left commented out cannot appear in any query.",
            "#   name = {}                          filter only (WHERE); GROUP BY on it needs a noisy",
            "#                                      threshold on each key (so the budget needs a delta)",
            "#   name = { lower = L, upper = U }    public bounds: SUM and AVG clamp each value into them",
            "#   name = { values = [...] }          the public list of keys: GROUP BY releases every one",
        ]
        for name, sql_type in columns:
            out.append(f"# {_key(name)} = {{}}{' ' * (width - len(_key(name)))}  # {sql_type}: {_hint(sql_type)}")
        if file:
            out += _types_text(table, columns, width)
    return "\n".join(out) + "\n"


def _types_text(table: str, columns: list[tuple[str, str]], width: int) -> list[str]:
    """[tables.T.types]: every column of the file and the type dpsql reads it as."""
    out = [
        "",
        f"[tables.{_key(table)}.types]",
        "# The file's columns and the types dpsql reads them as. Analysts see these types for free,",
        "# so dpsql never takes them from the values when it opens the file: a value that does not",
        "# read as its column's type is read as NULL, and a column left out here is not loaded.",
        "# `dpsql init` guessed them from the file as it is now (VARCHAR where some value did not read",
        "# as the guessed type): make each the type the column means (income: DOUBLE), not the type",
        "# today's values happen to have, since a type chosen from the values tells what they are.",
    ]
    for name, sql_type in columns:
        typ = file_type(sql_type)
        pad = " " * (width - len(_key(name)))
        if typ is None:
            out.append(f'# {_key(name)} = "VARCHAR"{pad}  # {sql_type}: not a type dpsql reads files as; left out')
        else:
            out.append(f'{_key(name)} = "{typ}"')
    return out
