"""The privacy-budget ledger: per-analyst spending, charged before any answer is released.

One SQLite file holds ``charges`` (one row per answered query: analyst, UTC time, epsilon, delta,
mechanism, the mechanism's full parameters as JSON, the query text), ``spent`` (one running-total
row per analyst, so ``spending()`` is one indexed read), and, for the reconstruction defence,
``subset_series`` (per analyst and population: how many subset-selection queries were answered and
which identity values they named) and ``answers`` (per analyst: released answers by query key, so
an identical repeat gets the same answer free). ``PRAGMA user_version`` records the schema version;
version 1 files (no reconstruction tables) are migrated in place.

Why the subset cap cannot be overrun either: the series row is read, checked against the cap and
updated inside the same ``BEGIN IMMEDIATE`` transaction as the charge, so two connections cannot
both take the last allowed query.

Why no analyst can overspend, across threads, processes and Ledger instances:
    Each charge is one SQLite transaction opened with ``BEGIN IMMEDIATE``, which takes the file's
    write lock *before* the analyst's running total is read. SQLite admits one writer per database
    file across every connection in every process (POSIX locks on the file and, in WAL mode, on its
    ``-shm`` index), so the read-check-insert-update sequences of two charges never interleave: the
    second waits (busy timeout, 60 s) until the first has committed or rolled back, then reads the
    committed total. (A deferred ``BEGIN`` would let both read first; one would then fail to upgrade
    its lock. Still no overspend, but a spurious error; IMMEDIATE avoids it.) The charge row and the
    running total are written in that same transaction, so both exist or neither does: ``spent``
    always equals the sum of ``charges``. A refused charge rolls back and records nothing.

Why a process killed right after a charge loses no record:
    ``charge()`` returns only after ``COMMIT`` has returned, and with ``synchronous=FULL`` SQLite's
    commit has written the transaction to the WAL (or, without WAL, to the database file through
    its rollback journal) and fsync'd it. Nothing of the charge is left in the process's memory, so
    killing the process after ``charge()`` returns loses nothing (the fsync also covers a power cut).
    A process killed *before* ``COMMIT`` leaves WAL frames without a commit mark (or a hot journal),
    which SQLite discards at the next open: no record, but also no answer, since the caller releases
    only after ``charge()`` returns. The failure direction is always "charged, not answered", never
    "answered, not charged".

Exact arithmetic:
    Epsilons and deltas are stored as decimal TEXT and summed as ``decimal.Decimal`` in a context
    wide enough for any sum of doubles and trapping ``Inexact``, so nothing is ever rounded. A float
    argument becomes ``Decimal(repr(x))``: 0.1 stays 0.1, six charges of 0.5 fit a budget of 3.0
    exactly, 150 charges of 0.01 fit 1.5 exactly, and 2.7 + 0.30000000000000004 exceeds 3.0.

Threads:
    One sqlite3 connection per Ledger (``check_same_thread=False``) and a ``threading.Lock`` held
    for each transaction or read. A sqlite3 connection must not be used by two threads at once; the
    lock makes each use exclusive. One connection per thread would buy nothing (SQLite admits one
    writer anyway) and would leave a connection open for every thread that ever charged, out of
    reach of ``close()``.

Limits:
    SQLite's locking needs a local filesystem (not NFS/SMB), and WAL needs every process that uses
    the ledger on the same host. Put the ledger file on a local disk.

Errors: ``BudgetExhausted`` (53000) when a charge does not fit; every SQLite or filesystem problem
becomes ``OperationalError`` naming the ledger path and the problem. Bad arguments are a caller's
bug and raise ``ValueError``. No message quotes query text or data.
"""
from __future__ import annotations

import json
import numbers
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from pathlib import Path

from dpsql.errors import BudgetExhausted, OperationalError, QueryRejected

__all__ = ["Ledger", "Spending", "SubsetCharge", "SubsetState", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2
MAX_NAMED = 4096        # identity values remembered per series; beyond, the count saturates
BUSY_TIMEOUT_S = 60.0   # how long a charge waits for another writer's lock

# Sums of doubles span at most ~650 decimal digits (1e308 down to 5e-324 with 17 digits);
# 1000 digits make every sum exact, and the Inexact trap would catch anything that is not.
_EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation, Overflow])
_ZERO = Decimal(0)

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS charges (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        analyst   TEXT NOT NULL,
        at        TEXT NOT NULL,            -- ISO 8601, UTC
        epsilon   TEXT NOT NULL,            -- decimal text
        delta     TEXT NOT NULL,            -- decimal text
        mechanism TEXT NOT NULL,
        params    TEXT NOT NULL,            -- JSON object: the mechanism's full parameters
        query     TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_analyst ON charges (analyst, id)",
    """CREATE TABLE IF NOT EXISTS spent (
        analyst TEXT PRIMARY KEY,
        epsilon TEXT NOT NULL,              -- decimal text: sum of charges.epsilon
        delta   TEXT NOT NULL,              -- decimal text: sum of charges.delta
        charges INTEGER NOT NULL
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
    """An analyst's spending against the totals the policy grants."""
    analyst: str
    epsilon_spent: float
    epsilon_remaining: float
    delta_spent: float
    delta_remaining: float
    epsilon_total: float
    delta_total: float


class Ledger:
    """Persistent per-analyst privacy-budget accounting in one SQLite file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fsdecode(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise ValueError("the privacy ledger must be a file: an in-memory ledger would forget spending")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
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
        except sqlite3.Error as err:
            self._discard()
            raise self._error(err) from err
        except BaseException:
            self._discard()
            raise

    # -- public API -------------------------------------------------------------------------------

    def charge(self, analyst: str, epsilon: float, delta: float, *, epsilon_total: float,
               delta_total: float, mechanism: str, params: Mapping[str, object],
               query: str | None = None, subset: SubsetCharge | None = None) -> int:
        """Record one query's cost, or refuse it; return the charge's id.

        Atomically: read the analyst's spending; if spent + this charge exceeds either total, raise
        BudgetExhausted (naming epsilon or delta, what is left and what the query needs) and record
        nothing; otherwise insert the charge row and update the running total, and commit durably.
        The caller must release the answer only after this returns. ``params`` are the mechanism's
        full parameters (stored as JSON so a tighter accountant can be added later); ``query`` is the
        normalised query text (normalising is the caller's job; only surrounding space is stripped).

        With ``subset``, the query selects people by identity: in the same transaction, if its series
        has already had as many answers as the cap allows, raise QueryRejected (42501) and record
        nothing; otherwise count it in the series along with the budget.
        """
        analyst = _name("analyst", analyst)
        eps, dlt = _amount("epsilon", epsilon), _amount("delta", delta)
        if eps == 0 and dlt == 0:
            raise ValueError("a charge needs epsilon > 0 or delta > 0")
        eps_total, dlt_total = _total("epsilon_total", epsilon_total), _total("delta_total", delta_total)
        mechanism = _name("mechanism", mechanism)
        params_json = _encode_params(mechanism, params)
        if query is not None:
            if not isinstance(query, str):
                raise ValueError(f"query must be a string or None, not {type(query).__name__}")
            query = query.strip()

        with self._transaction() as db:
            series = self._series_next(db, analyst, subset) if subset is not None else None
            spent_eps, spent_dlt = self._spent(db, analyst)
            for what, spent, need, total in (("epsilon", spent_eps, eps, eps_total),
                                             ("delta", spent_dlt, dlt, dlt_total)):
                if _EXACT.add(spent, need) > total:
                    left = max(_EXACT.subtract(total, spent), _ZERO)
                    raise BudgetExhausted(
                        f"privacy budget exhausted: {what} remaining {_show(left)}, "
                        f"this query needs {_show(need)}",
                        hint="the budget is set by the policy; ask its administrator")
            at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
            row_id = db.execute(
                "INSERT INTO charges (analyst, at, epsilon, delta, mechanism, params, query)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (analyst, at, str(eps), str(dlt), mechanism, params_json, query)).lastrowid
            db.execute(
                "INSERT INTO spent (analyst, epsilon, delta, charges) VALUES (?, ?, ?, 1)"
                " ON CONFLICT (analyst) DO UPDATE SET"
                " epsilon = excluded.epsilon, delta = excluded.delta, charges = charges + 1",
                (analyst, str(_EXACT.add(spent_eps, eps)), str(_EXACT.add(spent_dlt, dlt))))
            if series is not None:
                answered, named, unnamed = series
                db.execute(
                    "INSERT INTO subset_series (analyst, population, answered, named, unnamed, first_at, last_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (analyst, population) DO UPDATE SET"
                    " answered = excluded.answered, named = excluded.named, unnamed = excluded.unnamed,"
                    " last_at = excluded.last_at",
                    (analyst, subset.population, answered, json.dumps(sorted(named)), unnamed, at, at))
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

    def spending(self, analyst: str, *, epsilon_total: float, delta_total: float) -> Spending:
        """The analyst's spending so far and what is left of the given totals (never below 0)."""
        analyst = _name("analyst", analyst)
        eps_total, dlt_total = _total("epsilon_total", epsilon_total), _total("delta_total", delta_total)
        with self._use() as db:
            eps, dlt = self._spent(db, analyst)
        return Spending(
            analyst=analyst,
            epsilon_spent=float(eps),
            epsilon_remaining=float(max(_EXACT.subtract(eps_total, eps), _ZERO)),
            delta_spent=float(dlt),
            delta_remaining=float(max(_EXACT.subtract(dlt_total, dlt), _ZERO)),
            epsilon_total=float(epsilon_total),
            delta_total=float(delta_total),
        )

    def analysts(self) -> list[str]:
        """Every analyst with at least one charge, sorted."""
        with self._use() as db:
            return [a for (a,) in db.execute("SELECT analyst FROM spent ORDER BY analyst")]

    def charges(self, analyst: str | None = None) -> list[dict]:
        """Charge rows for admin tooling, oldest first: id, analyst, at (ISO UTC), epsilon, delta
        (floats; exact for float inputs), mechanism, params (decoded), query."""
        sql = "SELECT id, analyst, at, epsilon, delta, mechanism, params, query FROM charges"
        args: tuple = ()
        if analyst is not None:
            sql, args = sql + " WHERE analyst = ?", (_name("analyst", analyst),)
        with self._use() as db:
            rows = db.execute(sql + " ORDER BY id", args).fetchall()
        out = []
        for row_id, who, at, eps, dlt, mechanism, params, query in rows:
            try:
                decoded = json.loads(params)
            except ValueError as err:
                raise OperationalError(f"privacy ledger {self.path}: charge {row_id} has malformed params") from err
            out.append({"id": row_id, "analyst": who, "at": at,
                        "epsilon": float(self._stored(eps)), "delta": float(self._stored(dlt)),
                        "mechanism": mechanism, "params": decoded, "query": query})
        return out

    def close(self) -> None:
        """Close the connection; idempotent. Every committed charge is already on disk."""
        with self._lock:
            conn, self._conn = self._conn, None
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
        """Create the schema, or check that the file's schema is one this code understands."""
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
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

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

    def _spent(self, db: sqlite3.Connection, analyst: str) -> tuple[Decimal, Decimal]:
        row = db.execute("SELECT epsilon, delta FROM spent WHERE analyst = ?", (analyst,)).fetchone()
        return (self._stored(row[0]), self._stored(row[1])) if row else (_ZERO, _ZERO)

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
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


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


def _decimal(what: str, value: object) -> Decimal:
    """Exact decimal of a number; floats through their shortest repr, so 0.1 stays 0.1."""
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


def _encode_params(mechanism: str, params: object) -> str:
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
