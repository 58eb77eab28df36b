"""The privacy-budget ledger: per-analyst spending, charged before any answer is released.

One SQLite file holds ``charges`` (one row per answered query: analyst, UTC time, the query's
epsilon and delta, its zCDP cost rho and delta part, mechanism, the mechanism's full parameters as
JSON, the query text), ``spent`` (one running-total row per analyst, so ``spending()`` is one
indexed read, with the accountant the analyst's budget is kept under), and, for the reconstruction
defence, ``subset_series`` (per analyst and population: how many subset-selection queries were
answered and which identity values they named) and ``answers`` (per analyst: released answers by
query key, so an identical repeat gets the same answer free). ``PRAGMA user_version`` records the
schema version; version 1 and 2 files are migrated in place (v2 -> v3 below).

Accountants (dpsql.accounting):
    Every charge records both currencies: (epsilon, delta) and (rho, delta part). Which one is
    checked against the policy's (epsilon, delta) budget is the analyst's accountant: "zcdp" (the
    composed rho, with the delta part, must convert to within the budget: accounting.fits) or
    "basic" (epsilons and deltas add up to within it, the old rule). The accountant is fixed at the
    analyst's first charge (spent.accountant) and never changes afterwards, whatever a later policy
    says: a privacy filter is valid only for a stopping rule fixed in advance, and switching rules
    mid-way (or taking whichever is more favourable) is covered by neither composition theorem.

Migration v2 -> v3 (zCDP accounting):
    In one transaction: the rho and delta-part columns are added, every existing charge's rho is
    recomputed from its stored mechanism parameters (accounting.rho_of_params: exact for what a
    Session stored, else the generic epsilon^2/2 with the whole delta as delta part, never lower),
    the running totals are summed anew, and every analyst with charges is pinned to "basic": their
    budget was spent under basic composition, so it is kept under it.

Why the subset cap cannot be overrun either: the series row is read, checked against the cap and
updated inside the same ``BEGIN IMMEDIATE`` transaction as the charge, so two connections cannot
both take the last allowed query.

Group commit (one transaction and one fsync for many concurrent charges):
    Every Ledger of one process that has the same file open (by real path) shares one ``_Group``:
    a queue of pending charges and a connection of its own. A charging thread queues its charge; if
    no batch is being led, it becomes the leader, otherwise it waits on its own event. The leader
    takes every queued charge (at most MAX_BATCH; its own is the first), then, in ONE transaction
    opened with ``BEGIN IMMEDIATE``, applies them in queue order, each inside its own SAVEPOINT:
    read the analyst's running totals *as this transaction sees them* (so including every charge
    of the batch before it), check this charge against them, write its row and the new totals. A
    charge that does not fit (BudgetExhausted), that hits its subset cap (QueryRejected) or that
    fails in any other way is rolled back to its savepoint, and only it is refused: the totals the
    later charges are checked against are exactly those of the charges kept. Then one ``COMMIT``
    (one fsync), and only after COMMIT has returned are the kept charges given their row ids and
    every waiter of the batch woken with its own outcome. If the transaction fails as a whole
    (BEGIN, a savepoint, or COMMIT: disk full, I/O error, busy timeout), it is rolled back and every
    charge of the batch gets that error: none is recorded and none is released. The leader then
    hands over: if charges queued up meanwhile, the oldest one's thread is woken to lead the next
    batch. The wait is bounded: a charge waits at most for the batch being committed when it
    arrived plus its own (and, with GROUP_WINDOW_S > 0, for at most that window while its leader
    gathers the charges the last batch suggests are coming; 0 by default: while one batch commits
    the next one gathers by itself, which is what makes batches under load).

Why no analyst can overspend, across threads, processes and Ledger instances:
    Each batch is one SQLite transaction opened with ``BEGIN IMMEDIATE``, which takes the file's
    write lock *before* any running total is read. SQLite admits one writer per database file
    across every connection in every process (POSIX locks on the file and, in WAL mode, on its
    ``-shm`` index), so the batches of two processes (or a batch and any other writer) never
    interleave: the second waits (busy timeout, 60 s) until the first has committed or rolled back,
    then reads the committed totals. Within a batch the charges are applied one after another on
    one connection, each checked against the totals the earlier ones left: exactly the sequence of
    read-check-write steps that separate transactions in the same order would make, so a batch
    admits precisely what those one-charge transactions would have admitted. The charge row and
    the running total are written in the same savepoint, and the savepoint is released into the
    transaction or rolled back as a whole, so both exist or neither does: ``spent`` always equals
    the sum of ``charges``. A refused charge records nothing.

Why the subset cap cannot be overrun either: the series row is read, checked against the cap and
updated inside the same savepoint as the charge, in the same batch transaction, so neither two
connections nor two charges of one batch can both take the last allowed query.

Why a query is never released before its charge is durable, and kill -9 loses no record:
    ``charge()`` returns (and the caller may release) only once the thread that ran the batch has
    seen ``COMMIT`` return: row ids are set after COMMIT, and waiters are woken after that. With
    ``synchronous=FULL`` SQLite's commit has written the transaction to the WAL (or, without WAL,
    to the database file through its rollback journal) and fsync'd it. Nothing of the charge is
    left in the process's memory, so killing the process after ``charge()`` returns loses nothing
    (the fsync also covers a power cut). A process killed *before* ``COMMIT`` has returned may
    leave WAL frames without a commit mark (or a hot journal), which SQLite discards at the next
    open: no record, but also no answer, since no charge of that batch has returned. The failure
    direction is always "charged, not answered", never "answered, not charged".

Exact arithmetic:
    Epsilons, deltas, rhos and delta parts are stored as decimal TEXT and summed as
    ``decimal.Decimal`` in a context wide enough for any sum of doubles and trapping ``Inexact``,
    so no sum is ever rounded. A float argument becomes ``Decimal(repr(x))``: 0.1 stays 0.1, six
    charges of 0.5 fit a budget of 3.0 exactly, 150 charges of 0.01 fit 1.5 exactly, and
    2.7 + 0.30000000000000004 exceeds 3.0. A rho (an exact rational) is rounded *up* to 30
    significant digits once, when it is recorded; the conversion of a total to (epsilon, delta)
    rounds every step towards refusing (dpsql.accounting).

Threads:
    Each Ledger has one sqlite3 connection (``check_same_thread=False``) for its reads, migrations
    and the answer cache, and a ``threading.Lock`` held for each use of it: a sqlite3 connection
    must not be used by two threads at once. Charges go through the file's ``_Group`` instead,
    whose connection only the current leader uses. The group's connection is closed when the last
    Ledger of the file in this process closes (after the running batch, if any).

Limits:
    SQLite's locking needs a local filesystem (not NFS/SMB), and WAL needs every process that uses
    the ledger on the same host. Put the ledger file on a local disk.

Errors: ``BudgetExhausted`` (53000) when a charge does not fit; every SQLite or filesystem problem
becomes ``OperationalError`` naming the ledger path and the problem. Bad arguments are a caller's
bug and raise ``ValueError``. No message quotes query text or data.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from dpsql import accounting
from dpsql.errors import BudgetExhausted, OperationalError, QueryRejected

__all__ = ["SCHEMA_VERSION", "Ledger", "Spending", "SubsetCharge", "SubsetState"]

SCHEMA_VERSION = 3
MAX_NAMED = 4096        # identity values remembered per series; beyond, the count saturates
BUSY_TIMEOUT_S = 60.0   # how long a charge waits for another writer's lock
GROUP_WINDOW_S = 0.0    # how long a leader may wait for more charges (see "Group commit")
MAX_BATCH = 256         # charges in one transaction at most

# Sums of doubles span at most ~650 decimal digits (1e308 down to 5e-324 with 17 digits);
# 1000 digits make every sum exact, and the Inexact trap would catch anything that is not.
_EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation, Overflow])
_ZERO = Decimal(0)

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


@dataclass(frozen=True, slots=True)
class SubsetCharge:
    """A subset-selection query's part of a charge: which series it joins and the cap rule.

    cap: a fixed cap (the policy's max_subset_queries), or a function of the number of distinct
    identity values the series has named (None when some query named none) giving the cap.
    """
    population: str
    named: frozenset[str]
    cap: int | Callable[[int | None], int]


@dataclass(frozen=True, slots=True)
class SubsetState:
    """A series after (or, for EXPLAIN, before) a query: answered so far, the cap, values named."""
    population: str
    answered: int
    cap: int
    named: int | None          # distinct identity values named, None if some query named none


@dataclass(frozen=True, slots=True)
class Spending:
    """An analyst's spending against the totals the policy grants.

    Under "basic": epsilon_spent and delta_spent are the sums of the charges'. Under "zcdp":
    epsilon_spent is the epsilon the composed total implies at the budget's delta (an upper
    bound), delta_spent the delta part (partition selection) spent, rho_total the rho the whole
    budget allows at its delta and rho_remaining what is left of it (lower bounds). rho_spent is
    the sum of the charges' rho under both (the ledger records it always)."""
    analyst: str
    epsilon_spent: float
    epsilon_remaining: float
    delta_spent: float
    delta_remaining: float
    epsilon_total: float
    delta_total: float
    accountant: str = "basic"
    rho_spent: float = 0.0
    rho_remaining: float | None = None       # None under basic
    rho_total: float | None = None           # None under basic


class Ledger:
    """Persistent per-analyst privacy-budget accounting in one SQLite file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fsdecode(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise ValueError("the privacy ledger must be a file: an in-memory ledger would forget spending")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._group: _Group | None = None
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OperationalError(f"privacy ledger {self.path}: cannot create its directory: "
                                   f"{err.strerror or err}") from err
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                         check_same_thread=False)
            self._wal()
            self._conn.execute("PRAGMA synchronous=FULL")
            self._migrate()
            self._group = _Group.acquire(self.path)
        except sqlite3.Error as err:
            self._discard()
            raise self._error(err) from err
        except BaseException:
            self._discard()
            raise

    # -- public API -------------------------------------------------------------------------------

    def charge(self, analyst: str, epsilon: float, delta: float, *, epsilon_total: float,
               delta_total: float, mechanism: str, params: Mapping[str, object],
               query: str | None = None, subset: SubsetCharge | None = None,
               rho: object = None, zcdp_delta: float | None = None, accountant: str = "basic") -> int:
        """Record one query's cost, or refuse it; return the charge's id (charge_with_spending)."""
        return self.charge_with_spending(analyst, epsilon, delta, epsilon_total=epsilon_total,
                                         delta_total=delta_total, mechanism=mechanism, params=params,
                                         query=query, subset=subset, rho=rho, zcdp_delta=zcdp_delta,
                                         accountant=accountant)[0]

    def charge_with_spending(self, analyst: str, epsilon: float, delta: float, *, epsilon_total: float,
                             delta_total: float, mechanism: str, params: Mapping[str, object],
                             query: str | None = None, subset: SubsetCharge | None = None,
                             rho: object = None, zcdp_delta: float | None = None,
                             accountant: str = "basic") -> tuple[int, Spending]:
        """Record one query's cost, or refuse it; return the charge's id and the analyst's spending
        as the charge's own transaction left it (what spending() would have read right after its
        COMMIT, without reading the ledger again).

        Atomically: read the analyst's spending; if spent + this charge does not fit the totals
        under the analyst's accountant, raise BudgetExhausted (naming what is short, what is left and
        what the query needs) and record nothing; otherwise insert the charge row and update the
        running totals, and commit durably. The caller must release the answer only after this
        returns. ``params`` are the mechanism's full parameters (stored as JSON); ``query`` is the
        normalised query text (normalising is the caller's job; only surrounding space is stripped).

        ``rho`` (a Fraction, Decimal or float) and ``zcdp_delta`` are the query's zCDP cost and delta
        part; without them the charge is taken as a generic (epsilon, delta)-DP release: rho =
        epsilon^2 / 2 and delta part = delta (dpsql.accounting, claim 3). ``accountant`` ("zcdp" or
        "basic") is used only if the analyst has none yet: the first charge fixes it for good.

        With ``subset``, the query selects people by identity: in the same transaction, if its series
        has already had as many answers as the cap allows, raise QueryRejected (42501) and record
        nothing; otherwise count it in the series along with the budget.
        """
        analyst = _name("analyst", analyst)
        eps, dlt = _amount("epsilon", epsilon), _amount("delta", delta)
        if eps == 0 and dlt == 0:
            raise ValueError("a charge needs epsilon > 0 or delta > 0")
        eps_total, dlt_total = _total("epsilon_total", epsilon_total), _total("delta_total", delta_total)
        if rho is None:
            z_rho = _epsilon_rho(eps)
            z_dlt = dlt if zcdp_delta is None else _amount("zcdp_delta", zcdp_delta)
        else:
            z_rho = _rho_amount(rho)
            z_dlt = _ZERO if zcdp_delta is None else _amount("zcdp_delta", zcdp_delta)
        if accountant not in accounting.ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(accounting.ACCOUNTANTS)}")
        mechanism = _name("mechanism", mechanism)
        params_json = _encode_params(mechanism, params)
        if query is not None:
            if not isinstance(query, str):
                raise ValueError(f"query must be a string or None, not {type(query).__name__}")
            query = query.strip()

        pending = _Pending(analyst, eps, dlt, eps_total, dlt_total, z_rho, z_dlt, accountant, mechanism,
                           params_json, query, subset)
        with self._lock:
            group = self._group
            if group is None or self._conn is None:
                raise OperationalError(f"privacy ledger {self.path}: closed")
        row_id = group.submit(self, pending)
        after = pending.after
        assert after is not None        # set by _apply, in the transaction COMMIT has just made durable
        return row_id, _spending_of(analyst, after, epsilon_total, delta_total, eps_total, dlt_total, accountant)

    def _apply(self, db: sqlite3.Connection, c: _Pending) -> int:
        """One charge inside the batch's open transaction (see "Group commit"): read the running
        totals as this transaction sees them (every earlier charge of the batch included), check,
        write. Raises BudgetExhausted/QueryRejected/ValueError/sqlite3.Error before or while
        writing; the caller rolls the charge's savepoint back then."""
        series = self._series_next(db, c.analyst, c.subset) if c.subset is not None else None
        total = self._spent(db, c.analyst)
        acc = total.accountant or c.accountant
        if acc == "basic":
            _check_basic(total, c.eps, c.dlt, c.eps_total, c.dlt_total)
        else:
            _check_zcdp(total, c.rho, c.zcdp_delta, c.eps_total, c.dlt_total)
        at = datetime.now(UTC).isoformat(timespec="microseconds")
        c.after = Totals(_EXACT.add(total.epsilon, c.eps), _EXACT.add(total.delta, c.dlt),
                         _EXACT.add(total.rho, c.rho), _EXACT.add(total.zcdp_delta, c.zcdp_delta), acc)
        row_id = db.execute(
            "INSERT INTO charges (analyst, at, epsilon, delta, mechanism, params, query, rho, zcdp_delta)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (c.analyst, at, str(c.eps), str(c.dlt), c.mechanism, c.params_json, c.query, str(c.rho),
             str(c.zcdp_delta))).lastrowid
        db.execute(
            "INSERT INTO spent (analyst, epsilon, delta, charges, rho, zcdp_delta, accountant)"
            " VALUES (?, ?, ?, 1, ?, ?, ?)"
            " ON CONFLICT (analyst) DO UPDATE SET"
            " epsilon = excluded.epsilon, delta = excluded.delta, charges = charges + 1,"
            " rho = excluded.rho, zcdp_delta = excluded.zcdp_delta, accountant = excluded.accountant",
            (c.analyst, str(c.after.epsilon), str(c.after.delta), str(c.after.rho), str(c.after.zcdp_delta), acc))
        if series is not None:
            answered, named, unnamed = series
            db.execute(
                "INSERT INTO subset_series (analyst, population, answered, named, unnamed, first_at, last_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (analyst, population) DO UPDATE SET"
                " answered = excluded.answered, named = excluded.named, unnamed = excluded.unnamed,"
                " last_at = excluded.last_at",
                (c.analyst, c.subset.population, answered, json.dumps(sorted(named)), unnamed, at, at))
        return row_id

    def subset_state(self, analyst: str, subset: SubsetCharge) -> SubsetState:
        """The series this subset query would join, as it would be were the query answered
        (for EXPLAIN DP and for messages): answered counts the series so far, not this query."""
        analyst = _name("analyst", analyst)
        with self._use() as db:
            answered, named, unnamed = self._series(db, analyst, subset.population)
        named = named | subset.named
        n = None if unnamed or not subset.named else len(named)
        return SubsetState(subset.population, answered, _cap(subset, n), n)

    def subset_series(self, analyst: str) -> list[SubsetState]:
        """Every population the analyst has probed with subset queries (admin view), by last use."""
        analyst = _name("analyst", analyst)
        with self._use() as db:
            rows = db.execute("SELECT population, answered, named, unnamed FROM subset_series"
                              " WHERE analyst = ? ORDER BY last_at", (analyst,)).fetchall()
        return [SubsetState(p, a, -1, None if u else len(json.loads(n))) for p, a, n, u in rows]

    # -- the answer cache
    def cached(self, analyst: str, key: str, max_age: float) -> str | None:
        """The payload released for this key within the last max_age seconds, else None."""
        analyst = _name("analyst", analyst)
        with self._use() as db:
            row = db.execute("SELECT at, payload FROM answers WHERE analyst = ? AND key = ?",
                             (analyst, key)).fetchone()
        if row is None or time.time() - row[0] > max_age:
            return None
        return row[1]

    def remember(self, analyst: str, key: str, payload: str, max_age: float, max_bytes: int | None = None) -> bool:
        """Keep a released answer for identical repeats; drop this analyst's entries older than max_age.

        max_bytes caps the analyst's cached payloads (so no analyst can fill the shared ledger's
        disk): the oldest entries are dropped to make room, and a payload larger than the cap is
        not kept. Returns whether the answer was kept."""
        analyst = _name("analyst", analyst)
        now = time.time()
        size = len(payload.encode("utf-8"))
        if max_bytes is not None and size > max_bytes:
            return False
        # Not fsync'd (synchronous=NORMAL for this one commit): a cache entry lost in a crash only
        # means the next repeat is charged again, the safe direction. The next charge's FULL commit
        # syncs the log, this entry included.
        # The connection is held throughout, so no charge can commit while it is NORMAL.
        with self._use() as db:
            db.execute("PRAGMA synchronous=NORMAL")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute("DELETE FROM answers WHERE analyst = ? AND at < ?", (analyst, now - max_age))
                    if max_bytes is not None:
                        db.execute("DELETE FROM answers WHERE analyst = ? AND key = ?", (analyst, key))
                        kept = 0
                        rows = db.execute("SELECT key, length(CAST(payload AS BLOB)) FROM answers WHERE analyst = ? "
                                          "ORDER BY at DESC", (analyst,)).fetchall()
                        for old_key, n in rows:      # newest first: keep what fits beside this answer
                            if kept + n + size <= max_bytes:
                                kept += n
                            else:
                                db.execute("DELETE FROM answers WHERE analyst = ? AND key = ?", (analyst, old_key))
                    db.execute("INSERT OR REPLACE INTO answers (analyst, key, at, payload) VALUES (?, ?, ?, ?)",
                               (analyst, key, now, payload))
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            finally:
                db.execute("PRAGMA synchronous=FULL")
        return True

    def spending(self, analyst: str, *, epsilon_total: float, delta_total: float,
                 accountant: str = "basic") -> Spending:
        """The analyst's spending so far and what is left of the given totals (never below 0), under
        the analyst's accountant (``accountant`` if the analyst has not spent yet)."""
        analyst = _name("analyst", analyst)
        eps_total, dlt_total = _total("epsilon_total", epsilon_total), _total("delta_total", delta_total)
        if accountant not in accounting.ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(accounting.ACCOUNTANTS)}")
        with self._use() as db:
            t = self._spent(db, analyst)
        return _spending_of(analyst, t, epsilon_total, delta_total, eps_total, dlt_total, accountant)

    def totals(self, analyst: str) -> Totals:
        """The analyst's exact running totals and accountant (None before the first charge)."""
        analyst = _name("analyst", analyst)
        with self._use() as db:
            return self._spent(db, analyst)

    def analysts(self) -> list[str]:
        """Every analyst with at least one charge, sorted."""
        with self._use() as db:
            return [a for (a,) in db.execute("SELECT analyst FROM spent ORDER BY analyst")]

    def charges(self, analyst: str | None = None) -> list[dict]:
        """Charge rows for admin tooling, oldest first: id, analyst, at (ISO UTC), epsilon, delta
        (floats; exact for float inputs), mechanism, params (decoded), query, rho, zcdp_delta."""
        sql = "SELECT id, analyst, at, epsilon, delta, mechanism, params, query, rho, zcdp_delta FROM charges"
        args: tuple = ()
        if analyst is not None:
            sql, args = sql + " WHERE analyst = ?", (_name("analyst", analyst),)
        with self._use() as db:
            rows = db.execute(sql + " ORDER BY id", args).fetchall()
        out = []
        for row_id, who, at, eps, dlt, mechanism, params, query, rho, zdlt in rows:
            try:
                decoded = json.loads(params)
            except ValueError as err:
                raise OperationalError(f"privacy ledger {self.path}: charge {row_id} has malformed params") from err
            out.append({"id": row_id, "analyst": who, "at": at,
                        "epsilon": float(self._stored(eps)), "delta": float(self._stored(dlt)),
                        "mechanism": mechanism, "params": decoded, "query": query,
                        "rho": float(self._stored(rho)), "zcdp_delta": float(self._stored(zdlt))})
        return out

    def close(self) -> None:
        """Close the connection; idempotent. Every committed charge is already on disk."""
        with self._lock:
            conn, self._conn = self._conn, None
            group, self._group = self._group, None
            if group is not None:
                group.release()
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as err:
                    raise self._error(err) from err

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"

    # -- transactions and errors ------------------------------------------------------------------

    @contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """The connection, held exclusively; SQLite errors become OperationalError."""
        with self._lock:
            if self._conn is None:
                raise OperationalError(f"privacy ledger {self.path}: closed")
            try:
                yield self._conn
            except sqlite3.Error as err:
                raise self._error(err) from err

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""
        with self._use() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass   # the connection is unusable; the original error says why
                raise

    def _wal(self) -> None:
        """Switch to WAL. The switch takes an exclusive lock and SQLite answers SQLITE_BUSY at once,
        without waiting, while another process opens or switches the same file; so retry until the
        busy timeout. Rollback-journal mode (a filesystem without shared memory) is durable too."""
        conn = self._conn
        assert conn is not None
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as err:
                if err.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _migrate(self) -> None:
        """Create the schema, or bring an older file up to date (in one transaction), or check that
        the file's schema is one this code understands."""
        conn = self._conn
        assert conn is not None
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        with self._transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]   # another process may have won
            if version > SCHEMA_VERSION:
                raise OperationalError(f"privacy ledger {self.path}: schema version {version} is newer "
                                       f"than this dpsql understands ({SCHEMA_VERSION})")
            if version < SCHEMA_VERSION:
                for statement in _SCHEMA:
                    db.execute(statement)
                self._to_zcdp(db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _to_zcdp(self, db: sqlite3.Connection) -> None:
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
            rho, part = accounting.rho_of_params(decoded, self._stored(eps), self._stored(dlt))
            rho_d = accounting.decimal_up(rho)
            part_d = part
            db.execute("UPDATE charges SET rho = ?, zcdp_delta = ? WHERE id = ?", (str(rho_d), str(part_d), row_id))
            r, p = sums.get(who, (_ZERO, _ZERO))
            sums[who] = (_EXACT.add(r, rho_d), _EXACT.add(p, part_d))
        for who, (r, p) in sums.items():
            db.execute("UPDATE spent SET rho = ?, zcdp_delta = ?, accountant = 'basic' WHERE analyst = ?",
                       (str(r), str(p), who))
        db.execute("UPDATE spent SET rho = '0', zcdp_delta = '0', accountant = 'basic' WHERE rho IS NULL")

    def _series(self, db: sqlite3.Connection, analyst: str, population: str) -> tuple[int, set[str], int]:
        row = db.execute("SELECT answered, named, unnamed FROM subset_series WHERE analyst = ? AND population = ?",
                         (analyst, population)).fetchone()
        if row is None:
            return 0, set(), 0
        try:
            named = json.loads(row[1])
        except ValueError:
            named = None
        if not isinstance(named, list):
            raise OperationalError(f"privacy ledger {self.path}: malformed subset series in the ledger")
        return int(row[0]), set(named), int(row[2])

    def _series_next(self, db: sqlite3.Connection, analyst: str, subset: SubsetCharge):
        """The series after this query, or QueryRejected if its cap is reached."""
        answered, named, unnamed = self._series(db, analyst, subset.population)
        if len(named) < MAX_NAMED:
            named |= set(sorted(subset.named)[:MAX_NAMED - len(named)])
        if not subset.named:
            unnamed += 1
        n = None if unnamed else len(named)
        cap = _cap(subset, n)
        if answered >= cap:
            raise QueryRejected(
                f"another query selecting people by identity over the same population ({subset.population})",
                f"{answered} such queries were answered and the policy allows {cap} "
                "([reconstruction] max_subset_queries): a series of answers about chosen subsets of people "
                "can rebuild each person's data (Dinur-Nissim)",
                "ask about groups defined by what people are (age, state, ...), not by who they are")
        return answered + 1, named, unnamed

    def _spent(self, db: sqlite3.Connection, analyst: str) -> Totals:
        row = db.execute("SELECT epsilon, delta, rho, zcdp_delta, accountant FROM spent WHERE analyst = ?",
                         (analyst,)).fetchone()
        if row is None:
            return Totals(_ZERO, _ZERO, _ZERO, _ZERO, None)
        if row[4] not in accounting.ACCOUNTANTS:
            raise OperationalError(f"privacy ledger {self.path}: malformed accountant in the ledger")
        return Totals(self._stored(row[0]), self._stored(row[1]), self._stored(row[2]), self._stored(row[3]), row[4])

    def _stored(self, text: object) -> Decimal:
        try:
            value = Decimal(text) if isinstance(text, str) else None
        except InvalidOperation:
            value = None
        if value is None or not value.is_finite() or value < 0:
            raise OperationalError(f"privacy ledger {self.path}: malformed amount in the ledger")
        return value

    def _error(self, err: sqlite3.Error) -> OperationalError:
        return OperationalError(f"privacy ledger {self.path}: {err}")

    def _discard(self) -> None:
        if self._group is not None:
            self._group.release()
            self._group = None
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


@dataclass(slots=True, eq=False)
class _Pending:
    """One checked charge waiting for its batch, and, once its batch is over, its outcome."""
    analyst: str
    eps: Decimal
    dlt: Decimal
    eps_total: Decimal
    dlt_total: Decimal
    rho: Decimal
    zcdp_delta: Decimal
    accountant: str
    mechanism: str
    params_json: str
    query: str | None
    subset: SubsetCharge | None
    event: threading.Event = field(default_factory=threading.Event)
    lead: bool = False                  # woken to lead the next batch, not with an outcome
    row_id: int | None = None           # set only after the COMMIT holding the charge has returned
    error: BaseException | None = None
    after: Totals | None = None         # the analyst's totals with this charge (set by _apply)

    def outcome(self) -> int:
        if self.error is not None:
            raise self.error
        assert self.row_id is not None
        return self.row_id


class _Group:
    """The group committer of one ledger file in this process (see "Group commit" above).

    ``queue`` holds the charges not yet taken into a batch, oldest first; ``leading`` says a thread
    is leading (or has been chosen to lead) a batch. Invariant: the queue is non-empty only while
    ``leading`` is set, so every queued charge is taken by a leader. ``conn`` is this group's own
    connection, used by the leader only; it lives while some Ledger of this process has the file open.
    """

    window: float = GROUP_WINDOW_S
    on_commit: ClassVar[Callable[[str, tuple[int, ...]], None] | None] = None   # tests' instrumentation

    _registry: ClassVar[dict[tuple[int, str], _Group]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str, key: tuple[int, str]):
        self.path, self.key = path, key
        self.mu = threading.Lock()
        self.arrived = threading.Condition(self.mu)
        self.queue: deque[_Pending] = deque()
        self.leading = False
        self.refs = 0
        self.last_batch = 1
        self.conn: sqlite3.Connection | None = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            self.conn.execute("PRAGMA synchronous=FULL")
        except BaseException:
            self.conn.close()
            raise

    @classmethod
    def acquire(cls, path: str) -> _Group:
        """The group of this file in this process (by its real path), one reference more.
        Keyed by the process id too: a forked child never uses its parent's connection."""
        key = (os.getpid(), os.path.realpath(path))
        with cls._registry_lock:
            group = cls._registry.get(key)
            if group is None:
                group = cls._registry[key] = _Group(path, key)
            with group.mu:
                group.refs += 1
            return group

    def release(self) -> None:
        """One reference less; the last closes the connection (or, if a batch is running, the
        leader closes it when the batch is over)."""
        with self._registry_lock, self.mu:
            self.refs -= 1
            if self.refs > 0:
                return
            if self._registry.get(self.key) is self:
                del self._registry[self.key]
            if not self.leading:
                self._close()

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def submit(self, ledger: Ledger, pending: _Pending) -> int:
        """Queue a charge and return its row id once the COMMIT holding it has returned (or raise
        why it was refused). The first charger with no leader running leads; the others wait to be
        woken with their outcome, or to lead the next batch."""
        with self.mu:
            self.queue.append(pending)
            lead = not self.leading
            self.leading = True
            self.arrived.notify()
        if not lead:
            try:
                pending.event.wait()
            except BaseException:
                # Interrupted (KeyboardInterrupt in the main thread): a charge still queued is
                # withdrawn; one already in a batch, or chosen to lead the next, is seen through
                # first, so that no batch is left without a leader. Then the interrupt goes on.
                with self.mu:
                    withdrawn = not pending.lead and pending in self.queue
                    if withdrawn:
                        self.queue.remove(pending)
                if not withdrawn:
                    pending.event.wait()
                    if pending.lead:
                        self._lead(ledger)
                raise
            if not pending.lead:
                return pending.outcome()
        self._lead(ledger)
        return pending.outcome()

    def _lead(self, ledger: Ledger) -> None:
        """Take a batch (the leader's own charge is the queue's first), run it, hand over."""
        batch: list[_Pending] = []
        try:
            with self.mu:
                if self.window > 0 and self.last_batch > 1:
                    # Bounded wait for the charges the last batch suggests are on their way.
                    deadline = time.monotonic() + self.window
                    while len(self.queue) < min(self.last_batch, MAX_BATCH):
                        left = deadline - time.monotonic()
                        if left <= 0 or not self.arrived.wait(left):
                            break
                batch = [self.queue.popleft() for _ in range(min(len(self.queue), MAX_BATCH))]
                self.last_batch = len(batch)
            self._run(ledger, batch)
        finally:
            for p in batch:                  # never left without an outcome, whatever happened
                if p.row_id is None and p.error is None:
                    p.error = OperationalError(f"privacy ledger {self.path}: the charge's batch was interrupted")
            with self.mu:
                nxt = self.queue[0] if self.queue else None
                if nxt is not None:
                    nxt.lead = True          # stays leading: the next batch's leader is chosen
                else:
                    self.leading = False
                    if self.refs <= 0:
                        self._close()
            for p in batch:
                p.event.set()
            if nxt is not None:
                nxt.event.set()

    def _run(self, ledger: Ledger, batch: list[_Pending]) -> None:
        """One transaction for the batch: each charge checked against the running totals in order
        and kept or rolled back on its own (a savepoint each), then one COMMIT. Row ids are set
        only after COMMIT has returned; if the transaction fails as a whole, every charge of the
        batch gets the error and none is recorded."""
        db = self.conn
        if db is None:
            err = OperationalError(f"privacy ledger {self.path}: closed")
            for p in batch:
                p.error = err
            return
        kept: list[tuple[_Pending, int]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            for p in batch:
                db.execute("SAVEPOINT charge")
                try:
                    row_id = ledger._apply(db, p)
                except Exception as err:       # noqa: BLE001 -- any failure refuses this charge only
                    db.execute("ROLLBACK TO charge")
                    db.execute("RELEASE charge")
                    p.error = ledger._error(err) if isinstance(err, sqlite3.Error) else err
                    continue
                db.execute("RELEASE charge")
                kept.append((p, row_id))
            ids = tuple(row_id for _, row_id in kept)
            hook = _Group.on_commit
            if hook is not None:
                hook("commit", ids)
            db.execute("COMMIT")
            if hook is not None:
                hook("committed", ids)
        except BaseException as err:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass     # the connection is unusable; the original error says why
            failure = (ledger._error(err) if isinstance(err, sqlite3.Error) else
                       err if isinstance(err, OperationalError) else
                       OperationalError(f"privacy ledger {self.path}: the batch failed ({type(err).__name__})"))
            for p, _ in kept:
                p.error = failure
            for p in batch:
                if p.error is None:
                    p.error = failure
            if not isinstance(err, Exception):
                raise
            return
        for p, row_id in kept:
            p.row_id = row_id


@dataclass(frozen=True, slots=True)
class Totals:
    """An analyst's exact running totals, and the accountant fixed at their first charge."""
    epsilon: Decimal
    delta: Decimal
    rho: Decimal
    zcdp_delta: Decimal
    accountant: str | None


def _spending_of(analyst: str, t: Totals, epsilon_total: float, delta_total: float, eps_total: Decimal,
                 dlt_total: Decimal, accountant: str) -> Spending:
    """Spending from an analyst's running totals t and the budget's totals (as given, and exact)."""
    acc = t.accountant or accountant
    if acc == "basic":
        return Spending(
            analyst=analyst,
            epsilon_spent=float(t.epsilon),
            epsilon_remaining=float(max(_EXACT.subtract(eps_total, t.epsilon), _ZERO)),
            delta_spent=float(t.delta),
            delta_remaining=float(max(_EXACT.subtract(dlt_total, t.delta), _ZERO)),
            epsilon_total=float(epsilon_total),
            delta_total=float(delta_total),
            accountant="basic",
            rho_spent=float(t.rho),
        )
    eps_spent = accounting.epsilon_spent(t.rho, t.zcdp_delta, dlt_total)
    left_delta = max(_EXACT.subtract(dlt_total, t.zcdp_delta), _ZERO)
    capacity = accounting.rho_capacity(eps_total, left_delta)
    return Spending(
        analyst=analyst,
        epsilon_spent=eps_spent,
        epsilon_remaining=max(float(eps_total) - eps_spent, 0.0),
        delta_spent=float(t.zcdp_delta),
        delta_remaining=float(left_delta),
        epsilon_total=float(epsilon_total),
        delta_total=float(delta_total),
        accountant="zcdp",
        rho_spent=float(t.rho),
        rho_remaining=float(max(capacity - t.rho, _ZERO)),
        rho_total=float(accounting.rho_capacity(eps_total, dlt_total)),
    )


def _check_basic(t: Totals, eps: Decimal, dlt: Decimal, eps_total: Decimal, dlt_total: Decimal) -> None:
    """Basic composition: the epsilons and the deltas each add up to within the totals (exact)."""
    for what, spent, need, total in (("epsilon", t.epsilon, eps, eps_total), ("delta", t.delta, dlt, dlt_total)):
        if _EXACT.add(spent, need) > total:
            left = max(_EXACT.subtract(total, spent), _ZERO)
            raise BudgetExhausted(f"privacy budget exhausted: {what} remaining {_show(left)}, "
                                  f"this query needs {_show(need)}",
                                  hint="the budget is set by the policy; ask its administrator",
                                  resource=what, remaining=float(left), needed=float(need))


def _check_zcdp(t: Totals, rho: Decimal, part: Decimal, eps_total: Decimal, dlt_total: Decimal) -> None:
    """zCDP: the composed (rho, delta part) must convert to within the totals (accounting.fits)."""
    new_part = _EXACT.add(t.zcdp_delta, part)
    if new_part > dlt_total:
        left = max(_EXACT.subtract(dlt_total, t.zcdp_delta), _ZERO)
        raise BudgetExhausted(f"privacy budget exhausted: delta remaining {_show(left)}, "
                              f"this query needs {_show(part)} (partition selection)",
                              hint="the budget is set by the policy; ask its administrator",
                              resource="delta", remaining=float(left), needed=float(part))
    if not accounting.fits(_EXACT.add(t.rho, rho), new_part, eps_total, dlt_total):
        room = accounting.rho_capacity(eps_total, _EXACT.subtract(dlt_total, new_part))
        left = max(_EXACT.subtract(room, t.rho), _ZERO) if room.is_finite() else room
        raise BudgetExhausted(f"privacy budget exhausted: rho remaining {_show_rho(left)}, "
                              f"this query needs {_show_rho(rho)} (zCDP accounting of epsilon "
                              f"{_show(eps_total)}, delta {_show(dlt_total)})",
                              hint="the budget is set by the policy; ask its administrator",
                              resource="rho", remaining=float(left) if left.is_finite() else None,
                              needed=float(rho))


def _show_rho(value: Decimal) -> str:
    """A rho for a message, to 6 significant digits (the comparison itself is exact)."""
    if not value.is_finite():
        return "unlimited"
    return f"{float(value):.6g}"


def _rho_amount(value: object) -> Decimal:
    """A query's rho, rounded up to accounting.RHO_DIGITS significant digits."""
    if isinstance(value, bool):
        raise ValueError("rho must be a number, not a bool")
    if isinstance(value, Decimal):
        if not value.is_finite() or value < 0:
            raise ValueError("rho must be finite and >= 0")
        frac = Fraction(value)
    elif isinstance(value, (Fraction, numbers.Integral)):
        frac = Fraction(value)
    elif isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            raise ValueError("rho must be finite")
        frac = Fraction(x)
    else:
        raise ValueError(f"rho must be a number, not {type(value).__name__}")
    if frac < 0:
        raise ValueError("rho must be >= 0")
    return _rho_up(frac)


@lru_cache(maxsize=1024)
def _rho_up(frac: Fraction) -> Decimal:
    """accounting.decimal_up, kept: a plan's rho is charged again and again."""
    return accounting.decimal_up(frac)


@lru_cache(maxsize=1024)
def _epsilon_rho(eps: Decimal) -> Decimal:
    """The zCDP cost of a generic epsilon-DP charge, eps^2 / 2 rounded up (accounting, claim 3)."""
    return accounting.decimal_up(Fraction(eps) ** 2 / 2)


# -- argument checks --------------------------------------------------------------------------------

def _cap(subset: SubsetCharge, named: int | None) -> int:
    cap = subset.cap(named) if callable(subset.cap) else subset.cap
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError("a subset cap must be a whole number >= 0")
    return cap


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value


@lru_cache(maxsize=4096)
def _float_decimal(value: float) -> Decimal:
    """_decimal of a float that is >= 0 (a query's amounts repeat: kept, not converted again)."""
    result = Decimal(float.__repr__(value))
    return _ZERO if result.is_zero() else result


def _decimal(what: str, value: object) -> Decimal:
    """Exact decimal of a number; floats through their shortest repr, so 0.1 stays 0.1."""
    if type(value) is float and value >= 0:     # the common case (NaN and negatives fail the test)
        return _float_decimal(value)
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, not a bool")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, numbers.Integral):
        result = Decimal(int(value))
    elif isinstance(value, numbers.Real):   # float, numpy floats: through the float's shortest repr
        result = Decimal(float.__repr__(float(value)))   # not repr(): numpy's says "np.float64(0.1)"
    else:
        raise ValueError(f"{what} must be a number, not {type(value).__name__}")
    if result.is_nan() or result < 0:
        raise ValueError(f"{what} must be >= 0")
    return _ZERO if result.is_zero() else result


def _amount(what: str, value: object) -> Decimal:
    result = _decimal(what, value)
    if not result.is_finite():
        raise ValueError(f"{what} must be finite")
    return result


def _total(what: str, value: object) -> Decimal:
    return _decimal(what, value)   # +inf allowed: an unlimited budget


class ChargeParams(Mapping):
    """A charge's mechanism parameters, encoded once: what the ledger records is the JSON made
    when this object is, and reading it gives that JSON's content (changing the mapping it was
    made from afterwards changes neither). For callers that charge the same parameters again and
    again (a session charges a plan's on each run): the ledger takes it in place of a dict."""

    __slots__ = ("json", "_items")

    def __init__(self, mechanism: str, params: Mapping[str, object]):
        self.json = _encode_params(mechanism, params)
        self._items = json.loads(self.json)

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _encode_params(mechanism: str, params: object) -> str:
    if type(params) is ChargeParams:
        return params.json
    if not isinstance(params, Mapping):
        raise ValueError(f"params of {mechanism!r} must be a mapping")
    try:
        return json.dumps(dict(params), sort_keys=True, allow_nan=False, separators=(",", ":"),
                          default=_json_scalar)
    except (TypeError, ValueError) as err:
        raise ValueError(f"params of {mechanism!r} must be JSON-serialisable: {err}") from None


def _json_scalar(value: object) -> object:
    item = getattr(value, "item", None)   # numpy scalars
    if callable(item):
        plain = item()
        if isinstance(plain, (int, float, str, bool)) or plain is None:
            return plain
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _show(value: Decimal) -> str:
    """Plain decimal notation: 0.000001, not 1E-6."""
    if not value.is_finite():
        return "unlimited"
    return format(value.normalize(_EXACT), "f") if value else "0"
