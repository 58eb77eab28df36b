"""The engine protocol: small, and nothing about privacy.

An engine runs one SELECT and returns all its rows (one per group for private
queries), and answers a few catalog questions at connect time. A new engine is one
module with a class meeting `Engine`, one line in `open_engine` (dpsql.engines.factory), and
one entry in the engine list of tests/conftest.py.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dpsql.errors import SchemaChanged


@dataclass(frozen=True, slots=True)
class Rows:
    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the engine says about one relation, as a guarantee may rely on it.

    kind: "table" (a base table) or "view" (anything that may read other tables: a view,
    materialized view, foreign table). columns: (name, type) in order; unique: columns the
    engine alone guarantees unique (single-column PRIMARY KEY/UNIQUE); not_null: columns it
    guarantees are never NULL. inexact: columns whose equality in the engine is not the
    equality of their values' text (a collation that is not deterministic or not known to be,
    such as DuckDB's NOCASE or a PostgreSQL ICU collation with deterministic = false; a type
    with an equality of its own, such as PostgreSQL's citext or a domain over it): the engine
    would group 'CA' and 'ca' together. collation: the collation the engine compares text
    under when the text has none of its own (DuckDB's default_collation on a connection
    passed in by its owner), when that is not bytewise; '' when it is. Why these matter:
    dpsql.analysis.bind.exact_equality. A field that is None in an expectation is not checked."""
    kind: str = "table"
    columns: tuple[tuple[str, str], ...] | None = None
    unique: frozenset[str] | None = None
    not_null: frozenset[str] | None = None
    inexact: frozenset[str] | None = None
    collation: str | None = None

    def satisfies(self, expected: TableFacts) -> bool:
        return (self.kind == expected.kind
                and (expected.columns is None or self.columns == expected.columns)
                and (expected.unique is None or self.unique == expected.unique)
                and (expected.not_null is None or self.not_null == expected.not_null)
                and (expected.inexact is None or self.inexact == expected.inexact)
                and (expected.collation is None or self.collation == expected.collation))


Expect = Mapping[str, TableFacts]      # table reference -> the facts a query relies on


def check_facts(actual: Mapping[str, TableFacts], expect: Expect) -> None:
    """Raise SchemaChanged unless every expected relation exists with the expected facts."""
    for table, want in expect.items():
        got = actual.get(table)
        if got is None or not got.satisfies(want):
            raise SchemaChanged(f"the schema of {table!r} changed since dpsql read it (a column's type or "
                                "collation, a key, NOT NULL or the relation itself); nothing ran and nothing was charged",
                                "run the query again: dpsql re-reads the schema")


class Engine(Protocol):
    dialect: str       # sqlglot dialect name
    facts_fixed: bool  # True when nobody can change the schema while the engine is open
    # (optional) seconds one statement may run, or None: the engine stops its query past it, and
    # the Session holds the stages after the engine (release, post-processing) to the same limit
    statement_timeout: float | None

    def run(self, sql: str, params: Mapping[str, object] | None = None, *, expect: Expect | None = None,
            before: Callable[[], None] | None = None) -> Rows:
        """Run one SELECT; return all rows.

        expect: schema facts the query relies on. They are checked in the same transaction and
        snapshot as the query (with the relations locked against DDL where the engine can), and
        if one does not hold, SchemaChanged is raised and nothing runs. before: called after the
        check and before the query, inside the transaction (the Session charges the budget
        there); if it raises, nothing runs and the error propagates."""

    def facts(self, tables: list[str]) -> dict[str, TableFacts]:
        """The facts of each named relation that exists (a missing one is left out)."""

    def table_columns(self, table: str) -> dict[str, str]:
        """Column name (lower-case) -> type name; KeyError if there is no such table."""

    def unique_columns(self, table: str) -> set[str]:
        """Columns that the engine alone guarantees unique (single-column PRIMARY KEY/UNIQUE)."""

    def not_null_columns(self, table: str) -> set[str]:
        """Columns the engine guarantees are never NULL (NOT NULL or PRIMARY KEY)."""

    def base_tables(self) -> set[str]:
        """Names (lower-case) of the base tables an analyst's public query may read."""

    def namespace(self) -> tuple[str, str | None]:
        """(optional) The schema unqualified table names are read from, and the database
        (catalog) name: what a schema-qualified name may say. Engines without it (Spark) have
        qualified names refused."""

    def views(self) -> set[str]:
        """Names (lower-case) of views."""

    def interrupt(self) -> None:
        """Cancel the running query, if any (from another thread)."""

    def clone(self) -> Engine:
        """A new engine on the same database with its own connection and the same locked-down
        settings: clones run queries concurrently, and interrupt() on one cancels only its
        own query. The clone is closed on its own (closing it never closes the original)."""

    def close(self) -> None: ...
