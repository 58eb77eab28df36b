"""DuckDB, the embedded default engine.

A database file dpsql opens itself is opened read-only, with external access
(file readers, ATTACH of files, extension downloads) disabled and the configuration
locked, so no statement can widen what the engine reads. A connection object passed
in by its owner is used as it is.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Mapping

import duckdb

from dpsql.engines.base import Rows
from dpsql.errors import EngineError, InterfaceError

log = logging.getLogger("dpsql.engine")

LOCKED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


class DuckDBEngine:
    dialect = "duckdb"

    def __init__(self, target: str | duckdb.DuckDBPyConnection, *, threads: int | None = None,
                 memory_limit: str | None = None):
        self._lock = threading.Lock()
        if isinstance(target, str):
            config: dict[str, Any] = dict(LOCKED_CONFIG)
            if threads:
                config["threads"] = threads
            if memory_limit:
                config["memory_limit"] = memory_limit
            if target != ":memory:" and not os.path.exists(target):
                raise InterfaceError(f"no DuckDB database at {target!r}")
            try:
                self._con = duckdb.connect(target, read_only=target != ":memory:", config=config)
            except duckdb.Error as err:
                raise InterfaceError(f"cannot open DuckDB database {target!r}: {err}") from None
            self._owned = True
            self.name = target
        else:
            self._con = target
            self._owned = False
            self.name = "<connection>"

    # -- queries
    def run(self, sql: str, params: Mapping[str, object] | None = None) -> Rows:
        with self._lock:
            try:
                cur = self._con.execute(sql, dict(params) if params else None)
                rows = cur.fetchall()
                desc = cur.description or []
            except duckdb.InterruptException:
                raise EngineError("the query was cancelled") from None
            except duckdb.Error as err:
                log.warning("duckdb failed: %s", err)
                raise EngineError("the engine could not run the query (details are in the server log)") from None
        return Rows(tuple(d[0] for d in desc), tuple(str(d[1]) for d in desc), rows)

    def interrupt(self) -> None:
        self._con.interrupt()

    def clone(self) -> "DuckDBEngine":
        """A new engine with its own connection to the same database (DuckDB's cursor():
        same database instance, same locked configuration). Closing it leaves this one open."""
        with self._lock:
            con = self._con.cursor()
        other = DuckDBEngine(con)
        other._owned = True
        other.name = self.name
        return other

    # -- catalog
    def _catalog(self, sql: str, params: list[Any]) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql, params).fetchall()

    def table_columns(self, table: str) -> dict[str, str]:
        schema, name = _split(table)
        rows = self._catalog(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE lower(table_name) = ? "
            "AND lower(schema_name) = ? AND NOT internal ORDER BY column_index", [name, schema])
        if not rows:
            raise KeyError(table)
        return {c.lower(): t for c, t in rows}

    def unique_columns(self, table: str) -> set[str]:
        schema, name = _split(table)
        rows = self._catalog(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE lower(table_name) = ? "
            "AND lower(schema_name) = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')", [name, schema])
        return {cols[0].lower() for (cols,) in rows if len(cols) == 1}

    def not_null_columns(self, table: str) -> set[str]:
        schema, name = _split(table)
        rows = self._catalog(
            "SELECT column_name FROM duckdb_columns() WHERE lower(table_name) = ? "
            "AND lower(schema_name) = ? AND NOT is_nullable", [name, schema])
        return {r[0].lower() for r in rows}

    def base_tables(self) -> set[str]:
        rows = self._catalog("SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary", [])
        return {r[0].lower() for r in rows}

    def views(self) -> set[str]:
        rows = self._catalog("SELECT view_name FROM duckdb_views() WHERE NOT internal", [])
        return {r[0].lower() for r in rows}

    def close(self) -> None:
        if self._owned:
            self._con.close()


def _split(table: str) -> tuple[str, str]:
    parts = table.lower().split(".")
    return (parts[-2], parts[-1]) if len(parts) > 1 else ("main", parts[-1])
