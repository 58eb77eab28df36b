"""DuckDB, the embedded default engine.

A database file dpsql opens itself is opened read-only, with external access
(file readers, ATTACH of files, extension downloads) disabled and the configuration
locked, so no statement can widen what the engine reads. A connection object passed
in by its owner is used as it is.

Files as tables: a CSV or Parquet target (`people.csv`, `data/visits.parquet`, a glob) opens an
in-memory database holding one table named by the file's stem, and a policy `source` that names
files (it has a `/` or ends in .parquet, as on Spark) is loaded into a table of that name in an
in-memory catalog `dpsql_files` attached beside the database. Both are read once, when the engine
opens, and only then is external access disabled and the configuration locked: later statements
can read no file.

Types of file tables: with the policy's declared types (`types`, Policy.file_types) a file is read
in a fixed way no value can steer (CSV: a header line, comma- or tab-separated by the extension,
RFC 4180 quotes, no comment or skipped lines, every field as text; Parquet: columns matched by
name over a glob, partition values as text) and each declared column is TRY_CAST to its type, so
a value that does not read as it is NULL and the table's columns and types are the policy's. Why
the types must not come from the values, and what else an analyst reads for free: dpsql.filetypes.
Without declared types the types are DuckDB's guess from the values (CSV) or the files (Parquet),
and the table is listed in `guessed`: dpsql.sources.read_schema refuses a policy that lets an
analyst see such a table. A loaded file is a snapshot: changes to
it are seen on the next connect. A table made from a file has no PRIMARY KEY, UNIQUE or NOT NULL,
so no query may assume its privacy unit unique or non-NULL (every query pre-aggregates per unit
and filters NULL units), whatever the file holds.

Schema facts a query relies on (TableFacts; which columns compare under a collation other than
binary, and the connection's default_collation, come from the binder: DuckDBEngine._inexact): a
file dpsql opened read-only cannot change
while it is open (DuckDB's file lock admits no writer beside a reader, and this process
cannot open it again read-write), nor can an in-memory database nobody else holds, so they
need no check (facts_fixed); nor can the in-memory tables loaded from files, which nobody
else holds. On a connection passed in by its owner, who may change the
schema from another cursor, run() checks them inside the query's own transaction: DuckDB's
catalog is versioned like its rows, so the facts read there are the ones the query sees.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import duckdb

from dpsql.engines.base import Expect, Rows, TableFacts, check_facts
from dpsql.errors import EngineError, InterfaceError, QueryCanceled
from dpsql.filetypes import file_column, file_type

log = logging.getLogger("dpsql.engine")

LOCKED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


FILES_CATALOG = "dpsql_files"      # the attached in-memory catalog holding the policy's path sources
FILE_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".parquet")


def is_file_target(target: str) -> bool:
    """A target that names a CSV or Parquet file (or a glob of them), not a DuckDB database."""
    return target.lower().endswith(FILE_SUFFIXES)


def is_path(source: str) -> bool:
    """A policy source that names files (the test of dpsql.rewrite.relation.is_path)."""
    return "/" in source or "\\" in source or source.lower().endswith(".parquet")


def file_table_name(path: str) -> str:
    """The table a file target becomes: the file's stem, lower-case, with every character other
    than a letter, digit or _ replaced by _ (`my-data.csv` -> my_data); for a glob whose file
    name has wildcards, the directory's name (`data/visits/*.parquet` -> visits)."""
    name = os.path.basename(path)
    if glob.has_magic(name):
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) or "data"
    for suffix in (".gz", ".csv", ".tsv", ".parquet"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    name = re.sub(r"\W", "_", name.lower(), flags=re.ASCII) or "data"
    return "_" + name if name[0].isdigit() else name


def _is_parquet(path: str) -> bool:
    return path.lower().endswith(".parquet")


def _csv_options(path: str) -> str:
    """The dialect dpsql reads a CSV file in, fixed rather than sniffed (see the module docstring):
    RFC 4180 quoting, a header line, comma-separated (.csv) or tab-separated (.tsv), no comment
    lines, no skipped lines, and files of a glob matched by column name."""
    delim = "\\t" if path.lower().endswith((".tsv", ".tsv.gz")) else ","
    return (f"header = true, delim = E'{delim}', quote = '\"', escape = '\"', comment = '', skip = 0, "
            "union_by_name = true, hive_types_autocast = false")


def _guessing_reader(path: str) -> str:
    """The reading whose types DuckDB guesses from the values (CSV) or takes from the files
    (Parquet): only for a file whose types no policy declares (see the module docstring)."""
    if _is_parquet(path):
        return "read_parquet(?, union_by_name = true)"
    return f"read_csv(?, {_csv_options(path)})"


def _declared_reader(path: str) -> str:
    """The reading whose columns' types are the file's own (Parquet metadata) or VARCHAR (CSV):
    nothing here depends on a value, and the declared types are applied by TRY_CAST on top."""
    if _is_parquet(path):
        return "read_parquet(?, union_by_name = true, hive_types_autocast = false)"
    return f"read_csv(?, all_varchar = true, {_csv_options(path)})"


def _exists(path: str) -> bool:
    return bool(glob.glob(path)) if glob.has_magic(path) else os.path.exists(path)


def _unreadable(path: str, err: Exception) -> InterfaceError:
    log.warning("duckdb could not read %s: %s", path, err)
    if _is_parquet(path):
        return InterfaceError(f"cannot read {path!r} as Parquet (details are in the log)")
    sep = "tab" if ".tsv" in path.lower() else "comma"
    return InterfaceError(f"cannot read {path!r} as CSV with a header line, {sep}-separated, quoted with \" (a line "
                          "with more fields than the header, an unclosed quote or another encoding than UTF-8? "
                          "details are in the log)")


def file_columns(path: str) -> list[tuple[str, str]]:
    """A CSV or Parquet file's column names and the types dpsql would read them as, for the owner's
    `dpsql init` (it reads every value: only the owner runs it). Parquet: the type of the files'
    metadata (widened over a glob). CSV: the names of the header line as dpsql reads it, and the
    type DuckDB infers from the values where every value of the column reads as that type (TRY_CAST
    of each, as the declared reading does), else VARCHAR. Only names and types are returned, never
    a value."""
    if not _exists(path):
        raise InterfaceError(f"no such file: {path!r}")
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        con.execute(f"CREATE TABLE stage AS SELECT * FROM {_declared_reader(path)}", [path])
        names = [(r[0], r[1]) for r in con.execute("DESCRIBE stage").fetchall()]
        if _is_parquet(path):
            return names
        guessed = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {_guessing_reader(path)}",
                                                    [path]).fetchall()}
        typed = [(n, guessed.get(n, "VARCHAR")) for n, _ in names]
        checks = [f"bool_and({_quote(n)} IS NULL OR TRY_CAST({_quote(n)} AS {t}) IS NOT NULL)"
                  for n, t in typed if t != "VARCHAR"]
        if not checks:
            return typed
        ok = iter(con.execute(f"SELECT {', '.join(checks)} FROM stage").fetchone())
        return [(n, t if t == "VARCHAR" or next(ok) is not False else "VARCHAR") for n, t in typed]
    except duckdb.Error as err:
        raise _unreadable(path, err) from None
    finally:
        con.close()


_STAGE = "temp.main.dpsql_stage"


def _casts(path: str, names: Mapping[str, str], declared: Sequence[tuple[str, str]]) -> str:
    """The select list reading each declared column (names: the file's, by lower-case name) as its type."""
    out = []
    for column, sql_type in declared:
        typ = file_type(sql_type)
        if typ is None:
            raise InterfaceError(f"{sql_type!r} is not a type dpsql reads files as (dpsql.filetypes)")
        out.append(f"TRY_CAST({_quote(file_column(path, names, column))} AS {typ}) AS {_quote(column.lower())}")
    return ", ".join(out)


class DuckDBEngine:
    dialect = "duckdb"

    def __init__(self, target: str | duckdb.DuckDBPyConnection, *, threads: int | None = None,
                 memory_limit: str | None = None, sources: Mapping[str, str] | None = None,
                 types: Mapping[str, Sequence[tuple[str, str]]] | None = None):
        """target: a database file, ':memory:', a CSV/Parquet file (or glob), or a connection.
        sources: policy source (a path as written) -> the file or glob to read it from.
        types: the declared (column, type) list of each file table, keyed by the target's table
        name or the source as written (Policy.file_types); a file table without one is read with
        types guessed from the file and named in `guessed`."""
        self._lock = threading.Lock()
        self.files: frozenset[str] = frozenset()       # tables read from files (name, or source as written)
        self.guessed: frozenset[str] = frozenset()     # those whose types came from the file, not the policy
        if isinstance(target, str):
            files = {file_table_name(target): target} if is_file_target(target) else {}
            sources = {k: v for k, v in (sources or {}).items() if is_path(k)}
            config: dict[str, Any] = dict(LOCKED_CONFIG)
            if files or sources:    # read the files first, then lock
                del config["enable_external_access"], config["lock_configuration"]
            if threads:
                config["threads"] = threads
            if memory_limit:
                config["memory_limit"] = memory_limit
            database = ":memory:" if files else target
            if files and not _exists(target):
                raise InterfaceError(f"no such file: {target!r}")
            if database != ":memory:" and not os.path.exists(database):
                raise InterfaceError(f"no DuckDB database at {target!r}")
            try:
                self._con = duckdb.connect(database, read_only=database != ":memory:", config=config)
            except duckdb.Error as err:
                raise InterfaceError(f"cannot open DuckDB database {target!r}: {err}") from None
            try:
                if files or sources:
                    self._load(files, sources, types or {})
            except BaseException:
                self._con.close()
                raise
            self._owned = True
            self.name = target
            self.facts_fixed = True
        else:
            self._con = target
            self._owned = False
            self.name = "<connection>"
            self.facts_fixed = False

    def _load(self, files: Mapping[str, str], sources: Mapping[str, str],
              types: Mapping[str, Sequence[tuple[str, str]]]) -> None:
        """Read each file into its table (with its declared types where given), then disable
        external access and lock the configuration."""
        if sources:
            self._con.execute(f"ATTACH ':memory:' AS {FILES_CATALOG} (READ_WRITE)")
        todo = [(name, _quote(name), path) for name, path in files.items()]
        todo += [(ref, f"{FILES_CATALOG}.main.{_quote(ref)}", path) for ref, path in sources.items()]
        guessed = set()
        for key, table, path in todo:
            if not _exists(path):
                raise InterfaceError(f"no such file: {path!r}")
            declared = types.get(key)
            if declared is None:
                guessed.add(key)
            try:
                if declared is None:
                    self._con.execute(f"CREATE TABLE {table} AS SELECT * FROM {_guessing_reader(path)}", [path])
                else:
                    self._load_typed(table, path, declared)
            except duckdb.Error as err:
                raise _unreadable(path, err) from None
        self.files, self.guessed = frozenset(k for k, _, _ in todo), frozenset(guessed)
        for key, value in (("enable_external_access", "false"), ("lock_configuration", "true")):
            self._con.execute(f"SET {key} = {value}")

    def _load_typed(self, table: str, path: str, declared: Sequence[tuple[str, str]]) -> None:
        """Load the declared columns of a file with their declared types: the file as read by
        _declared_reader into a staging table, then TRY_CAST of each column, so a value that does
        not read as its type is NULL. (Staged because DuckDB 2.0 pushes a cast down into its CSV
        reader, where TRY_CAST fails on such a value instead.) The file's header (its column names,
        not a value) must name every declared column."""
        self._con.execute(f"CREATE TEMP TABLE {_STAGE} AS SELECT * FROM {_declared_reader(path)}", [path])
        try:
            names = {r[0].lower(): r[0] for r in self._con.execute(f"DESCRIBE {_STAGE}").fetchall()}
            self._con.execute(f"CREATE TABLE {table} AS SELECT {_casts(path, names, declared)} FROM {_STAGE}")
        finally:
            self._con.execute(f"DROP TABLE {_STAGE}")

    # -- queries
    def run(self, sql: str, params: Mapping[str, object] | None = None, *, expect: Expect | None = None,
            before: Callable[[], None] | None = None) -> Rows:
        check = bool(expect) and not self.facts_fixed
        with self._lock:
            try:
                if check:
                    self._con.execute("BEGIN TRANSACTION")
                try:
                    if check:
                        check_facts(self._facts(list(expect)), expect)
                    if before is not None:
                        before()
                    cur = self._con.execute(sql, dict(params) if params else None)
                    rows = cur.fetchall()
                    desc = cur.description or []
                finally:
                    if check:
                        self._con.execute("ROLLBACK")
            except duckdb.InterruptException:
                raise QueryCanceled("canceling statement due to user request: the query was cancelled") from None
            except duckdb.Error as err:
                log.warning("duckdb failed: %s", err)
                raise EngineError("the engine could not run the query (details are in the server log)") from None
        return Rows(tuple(d[0] for d in desc), tuple(str(d[1]) for d in desc), rows)

    def interrupt(self) -> None:
        self._con.interrupt()

    def clone(self) -> DuckDBEngine:
        """A new engine with its own connection to the same database (DuckDB's cursor():
        same database instance, same locked configuration). Closing it leaves this one open."""
        with self._lock:
            con = self._con.cursor()
        other = DuckDBEngine(con)
        other._owned = True
        other.name = self.name
        other.facts_fixed = self.facts_fixed
        other.files, other.guessed = self.files, self.guessed
        return other

    # -- catalog
    def _catalog(self, sql: str, params: list[Any]) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql, params).fetchall()

    def table_columns(self, table: str) -> dict[str, str]:
        schema, name = _split(table)
        rows = self._catalog(
            f"SELECT column_name, data_type FROM duckdb_columns() WHERE lower(table_name) = ? "
            f"AND {_key()} = ? AND NOT internal ORDER BY column_index", [name, f"{schema}.{name}"])
        if not rows:
            raise KeyError(table)
        return {c.lower(): t for c, t in rows}

    def unique_columns(self, table: str) -> set[str]:
        f = self.facts([table]).get(table)
        return set(f.unique) if f is not None else set()

    def not_null_columns(self, table: str) -> set[str]:
        f = self.facts([table]).get(table)
        return set(f.not_null) if f is not None else set()

    def facts(self, tables: list[str]) -> dict[str, TableFacts]:
        with self._lock:
            return self._facts(tables)

    def _facts(self, tables: list[str]) -> dict[str, TableFacts]:
        """One catalog query for every named relation (the caller holds the lock)."""
        wanted: dict[tuple[str, str], list[str]] = {}
        for t in tables:
            wanted.setdefault(_split(t), []).append(t)
        keys = [f"{s}.{n}" for s, n in wanted]
        cols = self._con.execute(
            "SELECT lower(c.schema_name), lower(c.table_name), lower(c.column_name), c.data_type, c.is_nullable, "
            "t.table_oid IS NOT NULL, c.database_name, c.schema_name, c.table_name FROM duckdb_columns() c "
            "LEFT JOIN duckdb_tables() t ON t.table_oid = c.table_oid "
            f"WHERE NOT c.internal AND list_contains(?, {_key('c.')}) "
            "ORDER BY c.table_oid, c.column_index", [keys]).fetchall()
        uniq = self._con.execute(
            "SELECT lower(schema_name), lower(table_name), constraint_column_names FROM duckdb_constraints() "
            "WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE') AND len(constraint_column_names) = 1 "
            f"AND list_contains(?, {_key()})", [keys]).fetchall()
        parts: dict[tuple[str, str], tuple[str, list, set]] = {}
        where: dict[tuple[str, str], str] = {}        # each relation's qualified name, to bind it by
        for schema, name, col, typ, nullable, base, database, raw_schema, raw_name in cols:
            if database == FILES_CATALOG:
                schema = FILES_CATALOG
            kind, columns, not_null = parts.setdefault((schema, name), ("table" if base else "view", [], set()))
            where.setdefault((schema, name), ".".join(map(_quote, (database, raw_schema, raw_name))))
            columns.append((col, typ))
            if not nullable:
                not_null.add(col)
        unique: dict[tuple[str, str], set[str]] = {}
        for schema, name, names in uniq:      # (no constraints in the files catalog)
            unique.setdefault((schema, name), set()).add(names[0].lower())
        default = self._con.execute("SELECT current_setting('default_collation')").fetchone()[0] or ""
        default = "" if _bytewise(default) else default
        inexact = self._inexact({k: (where[k], columns) for k, (_, columns, _) in parts.items()}, default)
        return {name: TableFacts(kind, tuple(columns), frozenset(unique.get(k, ())), frozenset(not_null),
                                 inexact[k], default)
                for k, (kind, columns, not_null) in parts.items() for name in wanted.get(k, ())}

    def _inexact(self, relations: dict[Any, tuple[str, list[tuple[str, str]]]],
                 default: str) -> dict[Any, frozenset[str]]:
        """Per relation (key -> (qualified name, columns)), the columns the engine compares under a
        collation other than binary: their own (COLLATE NOCASE, NOACCENT, NFC, an ICU locale...),
        or, for a VARCHAR without one, the connection's default_collation.

        DuckDB's catalog does not show a column's collation (duckdb_columns() says VARCHAR), but
        its binder does: the plan of `SELECT * FROM relation`, bound and not optimized
        (json_serialize_plan), types each output with its collation, a view's included (lower()
        of a NOCASE column is NOCASE too). Binding reads no row. One call binds every relation
        (one statement each); if it fails, each is bound alone, and a relation whose plan cannot
        be read has every VARCHAR column counted inexact (fail closed). The caller holds the lock."""
        out: dict[Any, frozenset[str]] = {}
        if not relations:
            return out
        collations = self._plan_collations([name for name, _ in relations.values()])
        if collations is None and len(relations) > 1:
            collations = [(self._plan_collations([name]) or [None])[0] for name, _ in relations.values()]
        for i, (k, (relation, columns)) in enumerate(relations.items()):
            found = collations[i] if collations is not None else None
            if found is None or len(found) != len(columns):
                log.warning("duckdb: cannot read the collations of %s; its text columns count as inexact", relation)
                found = ["?" if typ.upper() == "VARCHAR" else "" for _, typ in columns]
            out[k] = frozenset(col for (col, typ), c in zip(columns, found)
                               if not _bytewise(c or (default if typ.upper() == "VARCHAR" else "")))
        return out

    def _plan_collations(self, relations: list[str]) -> list[list[str] | None] | None:
        """Each relation's output collations ('' for none) from one json_serialize_plan call of
        `SELECT * FROM r1; SELECT * FROM r2; ...`; None when the call fails."""
        sql = "; ".join(f"SELECT * FROM {r}" for r in relations)
        try:
            plan = json.loads(self._con.execute("SELECT json_serialize_plan(?, optimize := false)",
                                                [sql]).fetchone()[0])
            plans = plan.get("plans") if not plan.get("error") else None
            if plans is None or len(plans) != len(relations):
                return None
            out: list[list[str] | None] = []
            for top in plans:
                exprs = top.get("expressions") if top.get("type") == "LOGICAL_PROJECTION" else None
                out.append(None if exprs is None else
                           [str(((e.get("return_type") or {}).get("type_info") or {}).get("collation") or "")
                            for e in exprs])
            return out
        except (duckdb.Error, ValueError, LookupError, TypeError, AttributeError) as err:
            log.warning("duckdb: json_serialize_plan failed: %s", err)
            return None

    def namespace(self) -> tuple[str, str | None]:
        """The schema an unqualified table name is read from (DuckDB's default search path:
        `main` of the database dpsql opened) and that database's (catalog's) name."""
        rows = self._catalog("SELECT current_database(), current_schema()", [])
        return str(rows[0][1]), str(rows[0][0])

    def base_tables(self) -> set[str]:
        rows = self._catalog("SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary "
                             f"AND database_name <> '{FILES_CATALOG}'", [])
        return {r[0].lower() for r in rows}

    def views(self) -> set[str]:
        rows = self._catalog("SELECT view_name FROM duckdb_views() WHERE NOT internal", [])
        return {r[0].lower() for r in rows}

    def close(self) -> None:
        if self._owned:
            self._con.close()


def _key(p: str = "") -> str:
    """A relation's key in SQL: schema.name, or dpsql_files.name for a loaded path source."""
    return (f"CASE WHEN {p}database_name = '{FILES_CATALOG}' THEN '{FILES_CATALOG}' ELSE lower({p}schema_name) END "
            f"|| '.' || lower({p}table_name)")


def _bytewise(collation: str) -> bool:
    """DuckDB compares text under this collation (a column's, or default_collation) by its bytes:
    none, or `binary`. Every other one (NOCASE, NOACCENT, NFC, ICU locales, their combinations,
    and collations an extension adds) may hold two different strings equal; `C` and `POSIX`
    are not counted as bytewise either, since nothing here proves them so."""
    return collation.strip().strip('"').lower() in ("", "binary")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _split(table: str) -> tuple[str, str]:
    if is_path(table):
        return FILES_CATALOG, table.lower()
    parts = table.lower().split(".")
    return (parts[-2], parts[-1]) if len(parts) > 1 else ("main", parts[-1])
