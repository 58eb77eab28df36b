"""The engine protocol: small, and nothing about privacy.

An engine runs one SELECT and returns all its rows (one per group for private
queries), and answers a few catalog questions at connect time. A new engine is one
module with a class meeting `Engine`, one line in `open_engine`, and one entry in
the engine list of tests/conftest.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol


@dataclass(frozen=True, slots=True)
class Rows:
    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]


class Engine(Protocol):
    dialect: str       # sqlglot dialect name

    def run(self, sql: str, params: Mapping[str, object] | None = None) -> Rows:
        """Run one SELECT; return all rows."""

    def table_columns(self, table: str) -> dict[str, str]:
        """Column name (lower-case) -> type name; KeyError if there is no such table."""

    def unique_columns(self, table: str) -> set[str]:
        """Columns that the engine alone guarantees unique (single-column PRIMARY KEY/UNIQUE)."""

    def not_null_columns(self, table: str) -> set[str]:
        """Columns the engine guarantees are never NULL (NOT NULL or PRIMARY KEY)."""

    def base_tables(self) -> set[str]:
        """Names (lower-case) of the base tables an analyst's public query may read."""

    def views(self) -> set[str]:
        """Names (lower-case) of views."""

    def interrupt(self) -> None:
        """Cancel the running query, if any (from another thread)."""

    def clone(self) -> "Engine":
        """A new engine on the same database with its own connection and the same locked-down
        settings: clones run queries concurrently, and interrupt() on one cancels only its
        own query. The clone is closed on its own (closing it never closes the original)."""

    def close(self) -> None: ...


def open_engine(target: Any, **options: Any) -> Engine:
    """An engine for a target:

    - DuckDB: a file path, ':memory:', 'duckdb:///path', or a duckdb connection object;
    - PostgreSQL: 'postgresql://user@host:port/db' (or 'postgres://...'; any libpq
      URL or conninfo parameters), or a psycopg 3 Connection (used as it is, not closed);
    - Spark: 'spark://local[*]' (local mode), 'spark://host:port' (a standalone master),
      'spark://yarn', 'spark://k8s://...', or a SparkSession (used as it is, not stopped);

    Engine modules are imported lazily, by scheme. `options` go to the engine class
    (DuckDB: threads, memory_limit; PostgreSQL: schema, statement_timeout, connect_timeout;
    Spark: conf, shuffle_partitions, executor_memory, executor_cores).
    """
    from dpsql.errors import InterfaceError
    if isinstance(target, str):
        scheme = target.split("://", 1)[0].lower() if "://" in target else ""
        if scheme in ("postgresql", "postgres"):
            from dpsql.engines.postgres import PostgresEngine
            return PostgresEngine(target, **options)
        if scheme == "spark":
            from dpsql.engines.spark import SparkEngine
            return SparkEngine(target, **options)
        if scheme not in ("", "duckdb"):
            raise InterfaceError(f"unknown target scheme {scheme!r}: use a DuckDB file path, "
                                 "':memory:', duckdb:///path, postgresql://... or spark://...")
        path = target
        if scheme == "duckdb":   # SQLAlchemy style: duckdb:///rel.db, duckdb:////abs.db, duckdb:///:memory:
            path = target.split("://", 1)[1]
            path = path[1:] if path.startswith("/") else path
        from dpsql.engines.duckdb import DuckDBEngine
        return DuckDBEngine(path or ":memory:", **options)
    if type(target).__name__ == "DuckDBPyConnection":
        from dpsql.engines.duckdb import DuckDBEngine
        return DuckDBEngine(target, **options)
    if type(target).__module__.startswith("psycopg") and type(target).__name__ == "Connection":
        from dpsql.engines.postgres import PostgresEngine
        return PostgresEngine(target, **options)
    if type(target).__module__.startswith("pyspark") and type(target).__name__ == "SparkSession":
        from dpsql.engines.spark import SparkEngine
        return SparkEngine(target, **options)
    raise InterfaceError(f"unsupported target of type {type(target).__name__}")
