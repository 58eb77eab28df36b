"""Group commit: one transaction and one fsync for many concurrent charges of one ledger file.

Every Ledger of one process that has the same file open (by real path) shares one ``Group``:
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

What a batch applies to each charge (the check and the writes) is the caller's ``apply``
(dpsql.ledger.store.Ledger._apply); why that admits no overspending and releases nothing before
its charge is durable is argued in dpsql.ledger.store.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar

from dpsql.errors import OperationalError
from dpsql.ledger import schema
from dpsql.ledger.budget import Totals
from dpsql.ledger.series import SubsetCharge

__all__ = ["GROUP_WINDOW_S", "MAX_BATCH", "Group", "Pending"]

GROUP_WINDOW_S = 0.0    # how long a leader may wait for more charges (see the module docstring)
MAX_BATCH = 256         # charges in one transaction at most

Apply = Callable[[sqlite3.Connection, "Pending"], int]     # one charge inside the batch's transaction
SqliteError = Callable[[sqlite3.Error], OperationalError]  # an SQLite error as the ledger reports it


@dataclass(slots=True, eq=False)
class Pending:
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
    after: Totals | None = None         # the analyst's totals with this charge (set by apply)

    def outcome(self) -> int:
        if self.error is not None:
            raise self.error
        assert self.row_id is not None
        return self.row_id


class Group:
    """The group committer of one ledger file in this process (see the module docstring).

    ``queue`` holds the charges not yet taken into a batch, oldest first; ``leading`` says a thread
    is leading (or has been chosen to lead) a batch. Invariant: the queue is non-empty only while
    ``leading`` is set, so every queued charge is taken by a leader. ``conn`` is this group's own
    connection, used by the leader only; it lives while some Ledger of this process has the file open.
    """

    window: float = GROUP_WINDOW_S
    on_commit: ClassVar[Callable[[str, tuple[int, ...]], None] | None] = None   # tests' instrumentation

    _registry: ClassVar[dict[tuple[int, str], Group]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str, key: tuple[int, str]):
        self.path, self.key = path, key
        self.mu = threading.Lock()
        self.arrived = threading.Condition(self.mu)
        self.queue: deque[Pending] = deque()
        self.leading = False
        self.refs = 0
        self.last_batch = 1
        self.conn: sqlite3.Connection | None = schema.connect(path)
        try:
            self.conn.execute("PRAGMA synchronous=FULL")
        except BaseException:
            self.conn.close()
            raise

    @classmethod
    def acquire(cls, path: str) -> Group:
        """The group of this file in this process (by its real path), one reference more.
        Keyed by the process id too: a forked child never uses its parent's connection."""
        key = (os.getpid(), os.path.realpath(path))
        with cls._registry_lock:
            group = cls._registry.get(key)
            if group is None:
                group = cls._registry[key] = Group(path, key)
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

    def submit(self, pending: Pending, apply: Apply, error: SqliteError) -> int:
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
                        self._lead(apply, error)
                raise
            if not pending.lead:
                return pending.outcome()
        self._lead(apply, error)
        return pending.outcome()

    def _lead(self, apply: Apply, error: SqliteError) -> None:
        """Take a batch (the leader's own charge is the queue's first), run it, hand over."""
        batch: list[Pending] = []
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
            self._run(batch, apply, error)
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

    def _run(self, batch: list[Pending], apply: Apply, error: SqliteError) -> None:
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
        kept: list[tuple[Pending, int]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            for p in batch:
                db.execute("SAVEPOINT charge")
                try:
                    row_id = apply(db, p)
                except Exception as err:       # noqa: BLE001 -- any failure refuses this charge only
                    db.execute("ROLLBACK TO charge")
                    db.execute("RELEASE charge")
                    p.error = error(err) if isinstance(err, sqlite3.Error) else err
                    continue
                db.execute("RELEASE charge")
                kept.append((p, row_id))
            ids = tuple(row_id for _, row_id in kept)
            hook = Group.on_commit
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
            failure = (error(err) if isinstance(err, sqlite3.Error) else
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
