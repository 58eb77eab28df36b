"""The privacy-budget ledger: per-analyst spending, charged before any answer is released.

``Ledger`` is one SQLite file (its tables: dpsql.ledger.schema) opened by this process: it checks
each charge against the analyst's budget under their accountant (dpsql.ledger.budget), records
it durably through the file's group committer (dpsql.ledger.group_commit), and keeps the subset
series (dpsql.ledger.series) and the answer cache (dpsql.ledger.answer_cache) beside the charges.

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

Threads:
    Each Ledger has one sqlite3 connection (``check_same_thread=False``) for its reads, migrations
    and the answer cache, and a ``threading.Lock`` held for each use of it: a sqlite3 connection
    must not be used by two threads at once. Charges go through the file's ``Group`` instead,
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
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from dpsql.errors import OperationalError
from dpsql.ledger import accounting, answer_cache, budget, schema, series
from dpsql.ledger.budget import Spending, Totals
from dpsql.ledger.group_commit import Group, Pending
from dpsql.ledger.params import EXACT, ZERO, amount, encode_params, epsilon_rho, name, rho_amount, stored, total
from dpsql.ledger.series import SubsetCharge, SubsetState

__all__ = ["Ledger"]


class Ledger:
    """Persistent per-analyst privacy-budget accounting in one SQLite file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fsdecode(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise ValueError("the privacy ledger must be a file: an in-memory ledger would forget spending")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._group: Group | None = None
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OperationalError(f"privacy ledger {self.path}: cannot create its directory: "
                                   f"{err.strerror or err}") from err
        try:
            self._conn = schema.connect(self.path)
            schema.wal(self._conn)
            self._conn.execute("PRAGMA synchronous=FULL")
            self._migrate()
            self._group = Group.acquire(self.path)
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
        epsilon^2 / 2 and delta part = delta (dpsql.ledger.accounting, claim 3). ``accountant`` ("zcdp" or
        "basic") is used only if the analyst has none yet: the first charge fixes it for good.

        With ``subset``, the query selects people by identity: in the same transaction, if its series
        has already had as many answers as the cap allows, raise QueryRejected (42501) and record
        nothing; otherwise count it in the series along with the budget.
        """
        analyst = name("analyst", analyst)
        eps, dlt = amount("epsilon", epsilon), amount("delta", delta)
        if eps == 0 and dlt == 0:
            raise ValueError("a charge needs epsilon > 0 or delta > 0")
        eps_total, dlt_total = total("epsilon_total", epsilon_total), total("delta_total", delta_total)
        if rho is None:
            z_rho = epsilon_rho(eps)
            z_dlt = dlt if zcdp_delta is None else amount("zcdp_delta", zcdp_delta)
        else:
            z_rho = rho_amount(rho)
            z_dlt = ZERO if zcdp_delta is None else amount("zcdp_delta", zcdp_delta)
        if accountant not in accounting.ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(accounting.ACCOUNTANTS)}")
        mechanism = name("mechanism", mechanism)
        params_json = encode_params(mechanism, params)
        if query is not None:
            if not isinstance(query, str):
                raise ValueError(f"query must be a string or None, not {type(query).__name__}")
            query = query.strip()

        pending = Pending(analyst, eps, dlt, eps_total, dlt_total, z_rho, z_dlt, accountant, mechanism,
                          params_json, query, subset)
        with self._lock:
            group = self._group
            if group is None or self._conn is None:
                raise OperationalError(f"privacy ledger {self.path}: closed")
        row_id = group.submit(pending, self._apply, self._error)
        after = pending.after
        assert after is not None        # set by _apply, in the transaction COMMIT has just made durable
        return row_id, budget.spending_of(analyst, after, epsilon_total, delta_total, eps_total, dlt_total, accountant)

    def _apply(self, db: sqlite3.Connection, c: Pending) -> int:
        """One charge inside the batch's open transaction (dpsql.ledger.group_commit): read the
        running totals as this transaction sees them (every earlier charge of the batch included),
        check, write. Raises BudgetExhausted/QueryRejected/ValueError/sqlite3.Error before or while
        writing; the caller rolls the charge's savepoint back then."""
        next_series = series.next_state(db, self.path, c.analyst, c.subset) if c.subset is not None else None
        spent = budget.read_spent(db, self.path, c.analyst)
        acc = spent.accountant or c.accountant
        budget.check(spent, c.eps, c.dlt, c.rho, c.zcdp_delta, acc, c.eps_total, c.dlt_total)
        at = datetime.now(UTC).isoformat(timespec="microseconds")
        c.after = Totals(EXACT.add(spent.epsilon, c.eps), EXACT.add(spent.delta, c.dlt),
                         EXACT.add(spent.rho, c.rho), EXACT.add(spent.zcdp_delta, c.zcdp_delta), acc)
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
        if next_series is not None:
            series.write(db, c.analyst, c.subset.population, next_series, at)
        return row_id

    def subset_state(self, analyst: str, subset: SubsetCharge) -> SubsetState:
        """The series this subset query would join, as it would be were the query answered
        (for EXPLAIN DP and for messages): answered counts the series so far, not this query."""
        analyst = name("analyst", analyst)
        with self._use() as db:
            return series.state(db, self.path, analyst, subset)

    def subset_series(self, analyst: str) -> list[SubsetState]:
        """Every population the analyst has probed with subset queries (admin view), by last use."""
        analyst = name("analyst", analyst)
        with self._use() as db:
            return series.all_series(db, analyst)

    # -- the answer cache
    def cached(self, analyst: str, key: str, max_age: float) -> str | None:
        """The payload released for this key within the last max_age seconds, else None."""
        analyst = name("analyst", analyst)
        with self._use() as db:
            return answer_cache.cached(db, analyst, key, max_age)

    def remember(self, analyst: str, key: str, payload: str, max_age: float, max_bytes: int | None = None) -> bool:
        """Keep a released answer for identical repeats (answer_cache.remember); whether it was kept."""
        analyst = name("analyst", analyst)
        with self._use() as db:
            return answer_cache.remember(db, analyst, key, payload, max_age, max_bytes)

    def spending(self, analyst: str, *, epsilon_total: float, delta_total: float,
                 accountant: str = "basic") -> Spending:
        """The analyst's spending so far and what is left of the given totals (never below 0), under
        the analyst's accountant (``accountant`` if the analyst has not spent yet)."""
        analyst = name("analyst", analyst)
        eps_total, dlt_total = total("epsilon_total", epsilon_total), total("delta_total", delta_total)
        if accountant not in accounting.ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(accounting.ACCOUNTANTS)}")
        with self._use() as db:
            t = budget.read_spent(db, self.path, analyst)
        return budget.spending_of(analyst, t, epsilon_total, delta_total, eps_total, dlt_total, accountant)

    def totals(self, analyst: str) -> Totals:
        """The analyst's exact running totals and accountant (None before the first charge)."""
        analyst = name("analyst", analyst)
        with self._use() as db:
            return budget.read_spent(db, self.path, analyst)

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
            sql, args = sql + " WHERE analyst = ?", (name("analyst", analyst),)
        with self._use() as db:
            rows = db.execute(sql + " ORDER BY id", args).fetchall()
        out = []
        for row_id, who, at, eps, dlt, mechanism, params, query, rho, zdlt in rows:
            try:
                decoded = json.loads(params)
            except ValueError as err:
                raise OperationalError(f"privacy ledger {self.path}: charge {row_id} has malformed params") from err
            out.append({"id": row_id, "analyst": who, "at": at,
                        "epsilon": float(stored(self.path, eps)), "delta": float(stored(self.path, dlt)),
                        "mechanism": mechanism, "params": decoded, "query": query,
                        "rho": float(stored(self.path, rho)), "zcdp_delta": float(stored(self.path, zdlt))})
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
    def _migrate(self) -> None:
        """Create the schema, or bring an older file up to date (in one transaction), or check that
        the file's schema is one this code understands."""
        conn = self._conn
        assert conn is not None
        if schema.version(conn) == schema.SCHEMA_VERSION:
            return
        with self._transaction() as db:
            schema.upgrade(db, self.path)

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
