"""Apache Spark (PySpark 3.5) through Spark SQL: local mode or a cluster.

Targets: `spark://local[*]` (or `spark://local[N]`, `spark://local`) for local mode,
`spark://host:port` for a standalone master, `spark://yarn`, `spark://k8s://https://...`;
or a SparkSession object (used as it is, never stopped). A URL target starts a
SparkContext when the process has none (stopped when the last engine on it closes) and
reuses the running one when its master is the same; one process holds one SparkContext,
so another master is refused. An engine dpsql starts from a URL queries through a
session of its own (`newSession()`: own temporary views and SQL settings, shared
catalog) with `spark.sql.runSQLOnFiles` off, so no SQL text can read a file directly.

Protected sources: a policy `source` that looks like a path (it contains a `/` or ends
in `.parquet`: a Parquet file or a directory of them, local, hdfs://, s3a://...) is read
with `spark.read.parquet` the first time the engine is asked about it and registered as a
temporary view whose name is the path itself; the Spark rewrite reads it as one quoted
identifier (`dpsql.rewrite.relation`). With the policy's declared types (`types`) the view is
try_cast of each declared column to its type, so neither a value nor the type one file was
written with shows in the schema (dpsql.filetypes); a source read without them is listed in
`guessed`, which dpsql.sources.read_schema refuses to show an analyst. Those views are in neither base_tables() nor
views(), so only the policy reaches them. Any other source is a catalog table name.

Each run() is one statement that Spark's parser reads as a query (never a command), run
under a job group of the engine's own, so interrupt() cancels only this engine's jobs.
Only the final aggregated rows are collected to Python: one per group. The bounding salt
is the named parameter `:salt`, bound by `spark.sql(sql, args=...)`.

Spark has no PRIMARY KEY or NOT NULL, so unique_columns() and not_null_columns() are
empty and every query takes the bounded (per-unit) rewrite. Spark has no transactions
either: the facts a query relies on (column types, a relation being a table) are read just
before it runs, which leaves the window between that read and the query's own analysis
(seconds at most) to a concurrent DDL; the README's threat model says so.
"""
from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from dpsql.engines.base import Expect, Rows, TableFacts, check_facts
from dpsql.errors import EngineError, Error, InterfaceError, QueryCanceled
from dpsql.filetypes import file_column, file_type

log = logging.getLogger("dpsql.engine")

_GENERIC = "the engine could not run the query (details are in the server log)"
_STANDALONE = re.compile(r"^[\w.-]+:\d+(,[\w.-]+:\d+)*/?$")
_QUERY = re.compile(r"\s*(\(\s*)*(SELECT|WITH)\b", re.IGNORECASE)

# Defaults for a SparkContext dpsql starts itself (a URL target); `conf` overrides them.
DEFAULT_CONF = {
    "spark.app.name": "dpsql",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}

_contexts_lock = threading.Lock()
_contexts: dict[int, int] = {}     # id(SparkContext) started by dpsql -> engines using it


def is_path(source: str) -> bool:
    """A policy source that names files (read as Parquet), not a catalog table.
    The same test as dpsql.rewrite.relation.is_path."""
    return "/" in source or "\\" in source or source.lower().endswith(".parquet")


def master_of(url: str) -> str:
    """The Spark master URL for a dpsql target: spark://local[*] -> local[*],
    spark://yarn -> yarn, spark://k8s://... -> k8s://..., spark://host:port unchanged."""
    rest = url.split("://", 1)[1]
    if not rest:
        raise InterfaceError("a Spark target needs a master: spark://local[*] or spark://host:port")
    if rest == "local" or rest.startswith("local[") or rest in ("yarn",) or rest.startswith("k8s://"):
        return rest
    if not _STANDALONE.match(rest):
        raise InterfaceError("a Spark target is spark://local[*], spark://host:port (host:port,host:port "
                             "for standby masters), spark://yarn or spark://k8s://...")
    return "spark://" + rest


class SparkEngine:
    dialect = "spark"
    facts_fixed = False

    def __init__(self, target: Any, *, conf: Mapping[str, Any] | None = None,
                 shuffle_partitions: int | None = None, executor_memory: str | None = None,
                 executor_cores: int | None = None, types: Mapping[str, Any] | None = None):
        """target: a spark:// URL or a SparkSession. conf: Spark settings for a SparkContext
        dpsql starts (spark.executor.memory, ...); shuffle_partitions, executor_memory and
        executor_cores are shorthands for the usual ones. types: the declared (column, type)
        list of each path source (Policy.file_types, dpsql.filetypes)."""
        self._lock = threading.Lock()
        self._types = {k: tuple(v) for k, v in (types or {}).items() if is_path(k)}
        self._group = f"dpsql-{uuid.uuid4().hex}"
        self._cancelling = False
        self._sources: dict[str, str] = {}          # view name (the path) -> path
        self._closed = False
        self._context_id: int | None = None
        if isinstance(target, str):
            settings = dict(DEFAULT_CONF)
            if shuffle_partitions:
                settings["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))
            if executor_memory:
                settings["spark.executor.memory"] = str(executor_memory)
            if executor_cores:
                settings["spark.executor.cores"] = str(int(executor_cores))
            settings.update({k: str(v) for k, v in (conf or {}).items()})
            self._spark = self._start(master_of(target), settings)
            self.name = target
        elif type(target).__name__ == "SparkSession":
            self._spark = target
            _read_parquet_as_written(target)
            self.name = "<spark session>"
        else:
            raise InterfaceError(f"unsupported Spark target of type {type(target).__name__}")

    def _start(self, master: str, settings: dict[str, str]) -> Any:
        try:
            from pyspark import SparkContext          # optional dependency: dpsql[spark]
            from pyspark.sql import SparkSession      # optional dependency: dpsql[spark]
        except ImportError:
            raise InterfaceError("the Spark backend needs pyspark: pip install 'dpsql[spark]'") from None
        with _contexts_lock:
            running = SparkContext._active_spark_context
            if running is not None:
                if running.master != master:
                    raise InterfaceError(f"this process already runs Spark on master {running.master!r}; "
                                         f"one process holds one SparkContext")
                base = SparkSession(running) if SparkSession.getActiveSession() is None \
                    else SparkSession.getActiveSession()
                if id(running) in _contexts:
                    _contexts[id(running)] += 1
                    self._context_id = id(running)
            else:
                builder = SparkSession.builder.master(master)
                for k, v in settings.items():
                    builder = builder.config(k, v)
                try:
                    base = builder.getOrCreate()
                except Exception as err:   # Java missing, master unreachable, bad setting
                    log.warning("spark start failed: %s", err)
                    raise InterfaceError(f"cannot start Spark on master {master!r} (is Java 17 installed and "
                                         "the master reachable?)") from None
                base.sparkContext.setLogLevel("ERROR")
                self._context_id = id(base.sparkContext)
                _contexts[self._context_id] = 1
        spark = base.newSession()
        spark.conf.set("spark.sql.runSQLOnFiles", "false")
        _read_parquet_as_written(spark)
        return spark

    def clone(self) -> SparkEngine:
        """A new engine on the same SparkSession (its temporary views, including the registered
        sources, stay visible) with its own job group: interrupt() on it cancels only its jobs."""
        other = SparkEngine.__new__(SparkEngine)
        other._lock = threading.Lock()
        other._group = f"dpsql-{uuid.uuid4().hex}"
        other._cancelling = False
        other._closed = False
        other._spark = self._spark
        other.name = self.name
        other._types = self._types
        with self._lock:
            other._sources = dict(self._sources)
        with _contexts_lock:
            other._context_id = self._context_id
            if other._context_id is not None:
                _contexts[other._context_id] += 1
        return other

    # -- queries
    def run(self, sql: str, params: Mapping[str, object] | None = None, *, expect: Expect | None = None,
            before: Callable[[], None] | None = None) -> Rows:
        if expect:
            check_facts(self.facts(list(expect)), expect)
        with self._lock:
            self._cancelling = False
            sc = self._spark.sparkContext
            try:
                self._check_query(sql)
                if before is not None:
                    before()
                sc.setJobGroup(self._group, "dpsql query", interruptOnCancel=True)
                df = self._spark.sql(sql, args=dict(params)) if params else self._spark.sql(sql)
                fields = df.schema.fields
                rows = [tuple(r) for r in df.collect()]
            except Error:          # ours, e.g. a refusal from before(): as it is
                raise
            except Exception as err:
                if self._cancelling:
                    raise QueryCanceled("canceling statement due to user request: the query was cancelled") from None
                log.warning("spark failed: %s", err)
                raise EngineError(_GENERIC) from None
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
        return Rows(tuple(f.name for f in fields), tuple(_type_name(f.dataType) for f in fields), rows)

    def _check_query(self, sql: str) -> None:
        """One statement that Spark's parser reads as a query: no command (DDL, INSERT,
        SET, CACHE, ...) ever reaches spark.sql(), which would run it at once."""
        if not _QUERY.match(sql):
            raise EngineError("the engine runs SELECT queries only")
        plan = self._spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)   # one statement, or it raises
        jvm = self._spark.sparkContext._jvm
        if plan.getClass().getSimpleName() == "UnresolvedWith":
            plan = plan.child()
        logical = "org.apache.spark.sql.catalyst.plans.logical."
        for kind in ("Command", "ParsedStatement", "InsertIntoStatement", "V2WriteCommand"):
            try:
                cls = jvm.java.lang.Class.forName(logical + kind)
            except Exception:       # not in this Spark version
                continue
            if cls.isInstance(plan):
                raise EngineError("the engine runs SELECT queries only")

    def interrupt(self) -> None:
        """Cancel this engine's running jobs (from another thread); nothing happens if none runs."""
        self._cancelling = True
        try:
            self._spark.sparkContext.cancelJobGroup(self._group)
        except Exception as err:
            log.warning("spark cancel failed: %s", err)

    # -- sources and catalog
    def _view(self, table: str) -> str:
        """The name to read `table` by: a registered path source, or the catalog name."""
        if not is_path(table):
            return table
        with self._lock:
            if table not in self._sources:
                try:
                    df = self._spark.read.parquet(table)
                except Exception as err:
                    log.warning("spark could not read source: %s", err)
                    raise KeyError(table) from None
                if table in self._types:
                    df = df.selectExpr(*_typed(table, df.columns, self._types[table]))
                df.createOrReplaceTempView(_quote(table))
                self._sources[table] = table
        return _quote(table)

    @property
    def files(self) -> frozenset[str]:
        """The path sources read so far."""
        with self._lock:
            return frozenset(self._sources)

    @property
    def guessed(self) -> frozenset[str]:
        """The path sources read so far without declared types (their types are the files')."""
        with self._lock:
            return frozenset(t for t in self._sources if t not in self._types)

    def _fields(self, table: str) -> list[Any]:
        name = self._view(table)
        try:
            return list(self._spark.table(name).schema.fields)
        except Exception as err:
            log.info("spark: no table %s: %s", table, err)
            raise KeyError(table) from None

    def table_columns(self, table: str) -> dict[str, str]:
        return {f.name.lower(): _type_name(f.dataType) for f in self._fields(table)}

    def unique_columns(self, table: str) -> set[str]:
        return set()

    def facts(self, tables: list[str]) -> dict[str, TableFacts]:
        """Columns and kind of each relation (a registered path source is a table); Spark
        guarantees no key and no NOT NULL. Spark 3.5 compares strings by their bytes (collations
        came with Spark 4.0); a string type that reports a collation other than UTF8_BINARY (as
        Spark 4's StringType does) makes its column inexact (TableFacts)."""
        out = {}
        for t in tables:
            try:
                fields = self._fields(t)
            except KeyError:
                continue
            cols = {f.name.lower(): _type_name(f.dataType) for f in fields}
            inexact = frozenset(f.name.lower() for f in fields if _collated(f.dataType))
            kind = "table"
            if not is_path(t):
                try:
                    info = self._spark.catalog.getTable(t)
                except Exception:
                    continue
                if info.isTemporary or info.tableType not in ("MANAGED", "EXTERNAL"):
                    kind = "view"
            out[t] = TableFacts(kind, tuple(cols.items()), frozenset(), frozenset(), inexact, "")
        return out

    def not_null_columns(self, table: str) -> set[str]:
        return set()

    def _tables(self) -> list[Any]:
        try:
            return self._spark.catalog.listTables()
        except Exception as err:
            log.warning("spark catalog failed: %s", err)
            raise EngineError(_GENERIC) from None

    def base_tables(self) -> set[str]:
        """Managed and external tables of the current database (never temporary views,
        so never a registered path source)."""
        return {t.name.lower() for t in self._tables() if not t.isTemporary and t.tableType in ("MANAGED", "EXTERNAL")}

    def views(self) -> set[str]:
        """Catalog views and temporary views other than the registered path sources."""
        sources = {s.lower() for s in self._sources}
        return {t.name.lower() for t in self._tables()
                if (t.isTemporary or t.tableType not in ("MANAGED", "EXTERNAL")) and t.name.lower() not in sources}

    def close(self) -> None:
        """Stop the SparkContext when dpsql started it and no other engine uses it."""
        if self._closed:
            return
        self._closed = True
        if self._context_id is None:
            return
        with _contexts_lock:
            _contexts[self._context_id] -= 1
            if _contexts[self._context_id] > 0:
                return
            del _contexts[self._context_id]
            try:
                self._spark.sparkContext.stop()
            except Exception as err:
                log.warning("spark stop failed: %s", err)


def _read_parquet_as_written(spark: Any) -> None:
    """Read Parquet dates and timestamps as written (proleptic Gregorian, as DuckDB, pyarrow and
    Spark 3 write them). Spark's default (EXCEPTION) fails every query reading a column in which
    some row holds a date before 1582-10-15 or a timestamp before 1900, and only then: one
    person's date would decide whether a query fails. Set on dpsql's own session, and on a
    SparkSession passed in (a read-side setting; files Spark 2 wrote with the hybrid calendar then
    read without rebasing, never with an error)."""
    for key in ("spark.sql.parquet.datetimeRebaseModeInRead", "spark.sql.parquet.int96RebaseModeInRead"):
        spark.conf.set(key, "CORRECTED")


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_TYPES = {"ByteType": "TINYINT", "ShortType": "SMALLINT", "IntegerType": "INTEGER", "LongType": "BIGINT",
          "FloatType": "FLOAT", "DoubleType": "DOUBLE", "StringType": "VARCHAR", "VarcharType": "VARCHAR",
          "CharType": "VARCHAR", "BooleanType": "BOOLEAN", "DateType": "DATE", "TimestampType": "TIMESTAMP",
          "TimestampNTZType": "TIMESTAMP", "BinaryType": "BLOB", "NullType": "NULL"}


# A declared file type (dpsql.filetypes' names) -> the Spark SQL type it is read as.
_SPARK_TYPES = {"BOOLEAN": "boolean", "TINYINT": "tinyint", "SMALLINT": "smallint", "INTEGER": "int",
                "BIGINT": "bigint", "HUGEINT": "decimal(38,0)", "FLOAT": "float", "DOUBLE": "double",
                "VARCHAR": "string", "DATE": "date", "TIMESTAMP": "timestamp", "TIMESTAMP WITH TIME ZONE": "timestamp"}


def _typed(source: str, columns: list[str], declared: tuple[tuple[str, str], ...]) -> list[str]:
    """The select list of a path source read with its declared types: try_cast of each declared
    column (a value that does not read as its type is NULL, with ANSI mode on or off)."""
    names = {c.lower(): c for c in columns}
    out = []
    for column, sql_type in declared:
        typ = file_type(sql_type) or ""
        spark = _SPARK_TYPES.get(typ) or (typ.lower() if typ.startswith("DECIMAL(") else None)
        if spark is None:
            raise InterfaceError(f"Spark cannot read a column as {sql_type!r}: declare another type for {column!r}")
        out.append(f"try_cast({_quote(file_column(source, names, column))} AS {spark}) AS {_quote(column.lower())}")
    return out


def _collated(dtype: Any) -> bool:
    """A string type with a collation other than Spark's bytewise UTF8_BINARY (Spark 4.0's
    StringType carries one; Spark 3.5's has none)."""
    collation = getattr(dtype, "collation", None)
    if callable(collation):
        collation = collation()
    return collation is not None and str(collation).upper() not in ("", "UTF8_BINARY")


def _type_name(dtype: Any) -> str:
    """A Spark type as a SQL type name dpsql.analysis.analyze.family() reads (BIGINT, DOUBLE,
    DECIMAL(38,0), VARCHAR, ...); arrays, maps and structs keep Spark's spelling (family other)."""
    kind = type(dtype).__name__
    if kind == "DecimalType":
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    return _TYPES.get(kind, dtype.simpleString().upper())
