"""The ledger file's SQLite schema, its connections, and the migrations of older files.

One SQLite file holds ``charges`` (one row per answered query: analyst, UTC time, the query's
epsilon and delta, its zCDP cost rho and delta part, mechanism, the mechanism's full parameters as
JSON, the query text), ``spent`` (one running-total row per analyst, so ``spending()`` is one
indexed read, with the accountant the analyst's budget is kept under), and, for the reconstruction
defence, ``subset_series`` (per analyst and population: how many subset-selection queries were
answered and which identity values they named) and ``answers`` (per analyst: released answers by
query key, so an identical repeat gets the same answer free). ``PRAGMA user_version`` records the
schema version; version 1 and 2 files are migrated in place (v2 -> v3 below).

Migration v2 -> v3 (zCDP accounting):
    In one transaction: the rho and delta-part columns are added, every existing charge's rho is
    recomputed from its stored mechanism parameters (accounting.rho_of_params: exact for what a
    Session stored, else the generic epsilon^2/2 with the whole delta as delta part, never lower),
    the running totals are summed anew, and every analyst with charges is pinned to "basic": their
    budget was spent under basic composition, so it is kept under it.
"""
from __future__ import annotations

import json
import sqlite3
import time
from decimal import Decimal

from dpsql.errors import OperationalError
from dpsql.ledger import accounting
from dpsql.ledger.params import EXACT, ZERO, stored

__all__ = ["BUSY_TIMEOUT_S", "SCHEMA_VERSION", "connect", "upgrade", "version", "wal"]

SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 60.0   # how long a charge waits for another writer's lock

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS charges (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        analyst   TEXT NOT NULL,
        at        TEXT NOT NULL,            -- ISO 8601, UTC
        epsilon   TEXT NOT NULL,            -- decimal text: the query's own (epsilon, delta)
        delta     TEXT NOT NULL,            -- decimal text
        mechanism TEXT NOT NULL,
        params    TEXT NOT NULL,            -- JSON object: the mechanism's full parameters
        query     TEXT,
        rho       TEXT NOT NULL,            -- decimal text (v3): zCDP cost, rounded up
        zcdp_delta TEXT NOT NULL            -- decimal text (v3): delta outside zCDP (partition selection)
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_analyst ON charges (analyst, id)",
    """CREATE TABLE IF NOT EXISTS spent (
        analyst TEXT PRIMARY KEY,
        epsilon TEXT NOT NULL,              -- decimal text: sum of charges.epsilon
        delta   TEXT NOT NULL,              -- decimal text: sum of charges.delta
        charges INTEGER NOT NULL,
        rho     TEXT NOT NULL,              -- decimal text (v3): sum of charges.rho
        zcdp_delta TEXT NOT NULL,           -- decimal text (v3): sum of charges.zcdp_delta
        accountant TEXT NOT NULL            -- (v3) zcdp | basic, fixed at the first charge
    ) WITHOUT ROWID""",
    # version 2: the reconstruction defence
    """CREATE TABLE IF NOT EXISTS subset_series (
        analyst    TEXT NOT NULL,
        population TEXT NOT NULL,           -- table | aggregates | non-identity filter
        answered   INTEGER NOT NULL,        -- subset queries answered (charged) over it
        named      TEXT NOT NULL,           -- JSON list of identity values named (query text)
        unnamed    INTEGER NOT NULL,        -- answered queries that named no values (ranges, ...)
        first_at   TEXT NOT NULL,
        last_at    TEXT NOT NULL,
        PRIMARY KEY (analyst, population)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS answers (
        analyst TEXT NOT NULL,
        key     TEXT NOT NULL,              -- hash of normalised query, parameters, epsilon, delta, mechanism
        at      REAL NOT NULL,              -- unix time of the release
        payload TEXT NOT NULL,              -- the released answer (JSON)
        PRIMARY KEY (analyst, key)
    ) WITHOUT ROWID""",
)


def connect(path: str) -> sqlite3.Connection:
    """A connection to the ledger file in autocommit mode (transactions are explicit), usable
    from any thread (its user holds a lock), waiting up to BUSY_TIMEOUT_S for another writer."""
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)


def wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. The switch takes an exclusive lock and SQLite answers SQLITE_BUSY at once,
    without waiting, while another process opens or switches the same file; so retry until the
    busy timeout. Rollback-journal mode (a filesystem without shared memory) is durable too."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def version(conn: sqlite3.Connection) -> int:
    """The file's schema version (0: a new file)."""
    return conn.execute("PRAGMA user_version").fetchone()[0]


def upgrade(db: sqlite3.Connection, path: str) -> None:
    """Inside the caller's BEGIN IMMEDIATE transaction: create the schema, or bring an older file up
    to date, or check that the file's schema is one this code understands."""
    found = version(db)   # another process may have won
    if found > SCHEMA_VERSION:
        raise OperationalError(f"privacy ledger {path}: schema version {found} is newer "
                               f"than this dpsql understands ({SCHEMA_VERSION})")
    if found < SCHEMA_VERSION:
        for statement in _SCHEMA:
            db.execute(statement)
        _to_zcdp(db, path)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _to_zcdp(db: sqlite3.Connection, path: str) -> None:
    """v3: add the zCDP columns to a file made before them and fill them (module docstring).
    A new file already has them (and no rows): nothing to do."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(charges)")}
    if "rho" in columns:
        return
    for table in ("charges", "spent"):
        db.execute(f"ALTER TABLE {table} ADD COLUMN rho TEXT")
        db.execute(f"ALTER TABLE {table} ADD COLUMN zcdp_delta TEXT")
    db.execute("ALTER TABLE spent ADD COLUMN accountant TEXT")
    sums: dict[str, tuple[Decimal, Decimal]] = {}
    for row_id, who, eps, dlt, params in db.execute(
            "SELECT id, analyst, epsilon, delta, params FROM charges ORDER BY id").fetchall():
        try:
            decoded = json.loads(params)
        except ValueError:
            decoded = None
        rho, part = accounting.rho_of_params(decoded, stored(path, eps), stored(path, dlt))
        rho_d = accounting.decimal_up(rho)
        part_d = part
        db.execute("UPDATE charges SET rho = ?, zcdp_delta = ? WHERE id = ?", (str(rho_d), str(part_d), row_id))
        r, p = sums.get(who, (ZERO, ZERO))
        sums[who] = (EXACT.add(r, rho_d), EXACT.add(p, part_d))
    for who, (r, p) in sums.items():
        db.execute("UPDATE spent SET rho = ?, zcdp_delta = ?, accountant = 'basic' WHERE analyst = ?",
                   (str(r), str(p), who))
    db.execute("UPDATE spent SET rho = '0', zcdp_delta = '0', accountant = 'basic' WHERE rho IS NULL")
