"""Opening an engine for a target: a path, a URL or a connection object (see open_engine).

Every engine module is imported here; only pyspark, an optional dependency, is imported when a
Spark engine starts (dpsql.engines.spark).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dpsql.engines.base import Engine
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.engines.postgres import PostgresEngine
from dpsql.engines.spark import SparkEngine
from dpsql.errors import InterfaceError

__all__ = ["open_engine", "path_sources"]


def path_sources(policy: Any) -> dict[str, str]:
    """A policy's protected-table sources that name files (a `/` in them, or ending in .parquet),
    each mapped to the file or glob to read: as written when absolute or not a local path,
    else relative to the policy file's directory (the ledger's rule)."""
    out = {}
    base = os.path.dirname(os.path.abspath(policy.source)) if policy.source != "<dict>" else os.getcwd()
    for t in policy.tables.values():
        s = t.source
        if s and ("/" in s or "\\" in s or s.lower().endswith(".parquet")):
            local = "://" not in s and not os.path.isabs(os.path.expanduser(s))
            out[s] = os.path.join(base, s) if local else os.path.expanduser(s)
    return out


def open_engine(target: Any, *, sources: Mapping[str, str] | None = None,
                types: Mapping[str, Any] | None = None, **options: Any) -> Engine:
    """An engine for a target:

    - DuckDB: a file path, ':memory:', 'duckdb:///path', or a duckdb connection object;
    - a CSV or Parquet file (`people.csv`, `data/visits.parquet`, a glob such as
      `data/*.parquet`): an in-memory DuckDB database holding one table, named by the file's
      stem, read from the file when the engine opens;
    - PostgreSQL: 'postgresql://user@host:port/db' (or 'postgres://...'; any libpq
      URL or conninfo parameters), or a psycopg 3 Connection (used as it is, not closed);
    - Spark: 'spark://local[*]' (local mode), 'spark://host:port' (a standalone master),
      'spark://yarn', 'spark://k8s://...', or a SparkSession (used as it is, not stopped);

    `options` go to the engine class (DuckDB: threads, memory_limit; PostgreSQL: schema,
    statement_timeout, connect_timeout; Spark: conf, shuffle_partitions, executor_memory,
    executor_cores). `sources` (from
    path_sources) are the policy's file sources, loaded by DuckDB when it opens; Spark reads
    them itself when first asked, other engines ignore them. `types` (Policy.file_types) are the
    declared column types of the tables DuckDB and Spark read from files (dpsql.filetypes).
    """
    if isinstance(target, str):
        scheme = target.split("://", 1)[0].lower() if "://" in target else ""
        if scheme in ("postgresql", "postgres"):
            return PostgresEngine(target, **options)
        if scheme == "spark":
            return SparkEngine(target, types=types, **options)
        if scheme not in ("", "duckdb"):
            raise InterfaceError(f"unknown target scheme {scheme!r}: use a DuckDB file path, "
                                 "':memory:', duckdb:///path, a .csv or .parquet file, postgresql://... "
                                 "or spark://...")
        path = target
        if scheme == "duckdb":   # SQLAlchemy style: duckdb:///rel.db, duckdb:////abs.db, duckdb:///:memory:
            path = target.split("://", 1)[1]
            path = path.removeprefix("/")
        return DuckDBEngine(path or ":memory:", sources=sources, types=types, **options)
    if type(target).__name__ == "DuckDBPyConnection":
        return DuckDBEngine(target, **options)
    if type(target).__module__.startswith("psycopg") and type(target).__name__ == "Connection":
        return PostgresEngine(target, **options)
    if type(target).__module__.startswith("pyspark") and type(target).__name__ == "SparkSession":
        return SparkEngine(target, types=types, **options)
    raise InterfaceError(f"unsupported target of type {type(target).__name__}")
