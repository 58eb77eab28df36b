"""Server resources for `dpsql serve`: no analyst can deny service to others (issue 12).

What one client can make the server spend is bounded three ways:

- `QuerySlots`: at most [server] max_concurrent_queries statements of one analyst run at once,
  over all of that analyst's connections; one more waits for a slot (`wait`: first come, first
  served, on the event loop, holding no thread) for at most [server] query_wait seconds, and is
  then refused (53400), charging nothing. `SharedQuerySlots` is the same limit over the
  processes of `dpsql serve --workers N`.
- `ConnectionLimits`: at most [server] max_connections_per_analyst sessions of one analyst and
  [server] max_connections in all; one more is refused at login (53300, as PostgreSQL's "too many
  connections for role"), before a session, and with it an engine connection, is opened. Each
  session holds a connection to the database, so without it one analyst could open connections
  until the database refuses everyone's.
- `Watchdog`: every emulated-catalog query stops after [server] catalog_timeout seconds (57014),
  or as soon as the client cancels, disconnects or the server shuts down; it may return at most
  [server] catalog_max_rows rows (54000, never a silent cut). catalog_sql.py refuses, before
  anything runs, the functions that could generate rows or text without bound.
- `Workers`: the thread pool queries run on. Its threads are daemon threads and shutdown waits
  for them only so long (Server.close), so a worker stuck in a query or held by the release
  timing ([timing] floor) cannot keep `dpsql serve` from stopping.

Error messages name the limit and the policy key, never a value from the data.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import fcntl
import hashlib
import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from dpsql.errors import ConfigurationLimitExceeded, ProgramLimitExceeded, QueryCanceled, TooManyConnections

# -- errors -------------------------------------------------------------------------------------------

class TooManyQueries(ConfigurationLimitExceeded):
    """One analyst has max_concurrent_queries statements running already.

    SQLSTATE 53400 configuration_limit_exceeded (class 53, insufficient resources): the resource
    is not exhausted server-wide (that would be 53000/53200) and this is not a connection limit
    (53300 too_many_connections): a limit the policy configures was reached, which is exactly
    what 53400 says. It differs from BudgetExhausted's 53000, so a client can tell "retry when a
    query has finished" from "the privacy budget is spent".

    It is also the error after a statement waited [server] query_wait seconds for a slot in
    vain. PostgreSQL's nearest wait, lock_timeout, answers 55P03 lock_not_available, and its
    statement_timeout 57014 query_canceled; but both say "your statement waited on, or ran
    into, something", while here nothing of the statement ran: the same configured limit was
    full for the whole wait, and a client's retry logic should treat "full at once" (query_wait
    = 0) and "full for 30 s" alike. So one code, 53400, with the wait in the message."""

    def __init__(self, limit: int, waited: float | None = None):
        what = f"waited {waited:g} s ([server] query_wait) for one of " if waited else ""
        super().__init__(f"too many queries running at once for this analyst: {what}at most {limit} "
                         f"([server] max_concurrent_queries); nothing was run or charged",
                         "wait for a running query to finish, or cancel it, and retry")
        self.limit = limit


class StatementTimeout(QueryCanceled):
    """A catalog query ran longer than catalog_timeout: 57014, as PostgreSQL's statement_timeout."""

    def __init__(self, seconds: float):
        super().__init__(f"canceling statement due to statement timeout: a catalog query may run for at most "
                         f"{seconds:g} s ([server] catalog_timeout)",
                         "dpsql answers catalog queries with names and types only; narrow the query")
        self.seconds = seconds


class RowLimitExceeded(ProgramLimitExceeded):
    """A catalog query would return more than catalog_max_rows rows.

    SQLSTATE 54000 program_limit_exceeded: the statement is valid but exceeds a limit of the
    server; the answer is refused whole rather than cut, so a client never takes a partial
    catalog for the complete one."""

    def __init__(self, limit: int):
        super().__init__(f"a catalog query may return at most {limit} rows ([server] catalog_max_rows); "
                         f"this one returns more, and nothing was returned",
                         "add a WHERE clause or a LIMIT")
        self.limit = limit


# -- per-analyst slots --------------------------------------------------------------------------------

class _Waiter:
    """A statement waiting for a query slot (QuerySlots.wait)."""
    __slots__ = ("loop", "future", "granted", "gone")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.future = loop, loop.create_future()
        self.granted = self.gone = False

    def wake(self) -> None:
        def done() -> None:
            if not self.future.done():
                self.future.set_result(None)
        try:
            self.loop.call_soon_threadsafe(done)
        except RuntimeError:          # the loop is closed: nobody waits any more
            pass


class QuerySlots:
    """How many statements each analyst has running, over all their connections.

    Prevents one analyst (or one stolen password) from taking every worker of the server: each
    analyst holds at most `limit` workers at a time, so the others keep theirs. Safe because a
    refusal happens before the statement reaches the Session or the catalog: nothing runs,
    nothing is charged, and the refusal depends only on the analyst's own queries in flight,
    never on data. The slot is given back when the worker finishes (not when the client stops
    waiting), so a query still running after a disconnect, or held by the release timing, counts.
    """

    def __init__(self, limit: int, refuse: Callable[[], Exception] | None = None):
        if limit < 1:
            raise ValueError("max_concurrent_queries must be at least 1")
        self.limit = limit
        self._refuse = refuse or (lambda: TooManyQueries(limit))
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[_Waiter]] = {}

    def acquire(self, analyst: str) -> None:
        """Take a slot, or raise TooManyQueries (also while others of the analyst wait: no
        statement overtakes the queue)."""
        with self._lock:
            n = self._running.get(analyst, 0)
            if n >= self.limit or self._waiting.get(analyst):
                raise self._refuse()
            self._running[analyst] = n + 1

    async def wait(self, analyst: str, timeout: float) -> None:
        """Take a slot, waiting for one at most `timeout` seconds behind the analyst's earlier
        waiters (first come, first served), then raise TooManyQueries. The wait is an asyncio
        future on the event loop: it holds no thread. A release hands its slot straight to the
        first waiter (release may run on a worker thread: call_soon_threadsafe). A waiter
        cancelled (CancelRequest, disconnect) or timed out leaves the queue, and gives back a slot
        handed to it meanwhile."""
        if timeout <= 0:
            return self.acquire(analyst)
        with self._lock:
            n = self._running.get(analyst, 0)
            if n < self.limit and not self._waiting.get(analyst):
                self._running[analyst] = n + 1
                return None
            w = _Waiter(asyncio.get_running_loop())
            self._waiting.setdefault(analyst, deque()).append(w)
        try:
            await asyncio.wait((w.future,), timeout=timeout)
        except BaseException:              # cancelled: a slot handed over meanwhile goes back
            if self._leave(analyst, w):
                self.release(analyst)
            raise
        if self._leave(analyst, w):        # granted (the flag, not the wake-up, is the truth)
            return None
        raise TooManyQueries(self.limit, timeout)

    def _leave(self, analyst: str, w: _Waiter) -> bool:
        """w stops waiting; whether a slot was handed to it (it then holds that slot)."""
        with self._lock:
            w.gone = True
            queue = self._waiting.get(analyst)
            if queue is not None and w in queue:
                queue.remove(w)
                if not queue:
                    del self._waiting[analyst]
            return w.granted

    def release(self, analyst: str) -> None:
        with self._lock:
            queue = self._waiting.get(analyst)
            while queue:
                w = queue.popleft()
                if not w.gone:
                    w.granted = True         # the slot passes to w: the count stays
                    break
            else:
                w = None
            if queue is not None and not queue:
                del self._waiting[analyst]
            if w is None:
                n = self._running.get(analyst, 0) - 1
                if n > 0:
                    self._running[analyst] = n
                else:
                    self._running.pop(analyst, None)
        if w is not None:
            w.wake()

    def waiting(self, analyst: str) -> int:
        """Statements of the analyst waiting for a slot."""
        with self._lock:
            return sum(not w.gone for w in self._waiting.get(analyst, ()))

    def running(self, analyst: str | None = None) -> int:
        """Statements running now: of one analyst, or of all."""
        with self._lock:
            if analyst is not None:
                return self._running.get(analyst, 0)
            return sum(self._running.values())


class SharedQuerySlots:
    """QuerySlots over several server processes (`dpsql serve --workers N`): an analyst's limit
    holds over all of their connections, whichever process serves each.

    Slot i of an analyst is a file in the server's private runtime directory, and holding the
    slot is holding an exclusive flock(2) on it. The kernel arbitrates: acquire tries the
    analyst's `limit` files without waiting and takes the first it can lock, or refuses
    (TooManyQueries) when all are held. flock locks belong to an open file description, so two
    threads of one process exclude each other as two processes do, and a process that dies, even
    by kill -9, gives its slots back with its descriptors: a crashed worker never leaves an
    analyst locked out. The file names carry a hash of the analyst's name, never the name.

    The refusal depends only on the analyst's own statements in flight, as with QuerySlots.
    """

    POLL_MAX = 0.02           # seconds between two tries of a waiting statement, at most

    def __init__(self, limit: int, directory: str | os.PathLike, *, prefix: str = "slot",
                 refuse: Callable[[], Exception] | None = None):
        if limit < 1:
            raise ValueError("max_concurrent_queries must be at least 1")
        self.limit = limit
        self.directory = os.fspath(directory)
        self.prefix = prefix
        self._refuse = refuse or (lambda: TooManyQueries(limit))
        self._lock = threading.Lock()
        self._held: dict[str, list[int]] = {}
        self._next = itertools.count()
        self._turns: dict[str, asyncio.Lock] = {}     # wait(): this process's queue of each analyst

    def _path(self, analyst: str, i: int) -> str:
        key = hashlib.sha256(analyst.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return os.path.join(self.directory, f"{self.prefix}-{key}-{i}")

    def acquire(self, analyst: str) -> None:
        """Take one of the analyst's slots in any process, or raise TooManyQueries."""
        start = next(self._next) % self.limit      # spread the tries over the files
        for j in range(self.limit):
            fd = os.open(self._path(analyst, (start + j) % self.limit), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            with self._lock:
                self._held.setdefault(analyst, []).append(fd)
            return
        raise self._refuse()

    async def wait(self, analyst: str, timeout: float) -> None:
        """Take a slot, waiting for one at most `timeout` seconds, then raise TooManyQueries.

        The slots are flock(2)s that other processes hold, so no release can wake this one.
        A blocking flock in a thread would hold a thread per waiting statement (exactly what the
        wait must not do) and cannot be given a timeout without signals; so the wait polls on
        the event loop, with a backoff from 1 ms doubling to POLL_MAX: a slot freed is taken
        within POLL_MAX, at a cost of at most 1/POLL_MAX tries a second per waiting analyst in a
        process. Within a process the waiters of one analyst queue on an asyncio.Lock (first
        come, first served) and only the first polls; between processes the kernel decides who
        gets a freed slot, and each process's first waiter competes fairly with its polls."""
        if timeout <= 0:
            return self.acquire(analyst)
        deadline = time.monotonic() + timeout
        turn = self._turns.setdefault(analyst, asyncio.Lock())
        try:
            await asyncio.wait_for(turn.acquire(), timeout)
        except TimeoutError:
            raise TooManyQueries(self.limit, timeout) from None
        try:
            pause = 0.001
            while True:
                try:
                    return self.acquire(analyst)
                except TooManyQueries:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TooManyQueries(self.limit, timeout) from None
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, self.POLL_MAX)
        finally:
            turn.release()

    def release(self, analyst: str) -> None:
        with self._lock:
            fds = self._held.get(analyst)
            if not fds:
                return
            fd = fds.pop()
            if not fds:
                del self._held[analyst]
        os.close(fd)            # closing the only descriptor of the file releases its lock

    def running(self, analyst: str | None = None) -> int:
        """Statements running now in this process: of one analyst, or of all."""
        with self._lock:
            if analyst is not None:
                return len(self._held.get(analyst, ()))
            return sum(len(v) for v in self._held.values())


class ConnectionLimits:
    """[server] max_connections_per_analyst and max_connections: sessions open at once.

    `admit(analyst)` after authentication and before the session opens; `leave(analyst)` once
    the session is closed (its engine connection given back), not when the client goes. The
    refusal depends only on how many sessions are open (the analyst's own, or everyone's),
    never on data, and comes after authentication, so it tells nobody whether a name exists.
    Over the processes of `dpsql serve --workers N` both limits hold in all (SharedQuerySlots
    on the runtime directory)."""

    def __init__(self, total: int, per_analyst: int, directory: str | os.PathLike | None = None):
        def slots(limit: int, prefix: str, refuse: Callable[[], Exception]):
            if directory is None:
                return QuerySlots(limit, refuse)
            return SharedQuerySlots(limit, directory, prefix=prefix, refuse=refuse)
        self.total, self.per_analyst = total, per_analyst
        self._all = slots(total, "conn-all", lambda: TooManyConnections(
            f"sorry, too many clients already: at most {total} sessions at once ([server] max_connections)",
            "try again when another client has disconnected"))
        self._own = slots(per_analyst, "conn", lambda: TooManyConnections(
            f"too many connections for this analyst: at most {per_analyst} at once "
            f"([server] max_connections_per_analyst)", "close a connection you no longer use, and retry"))

    def admit(self, analyst: str) -> None:
        self._own.acquire(analyst)
        try:
            self._all.acquire("")
        except BaseException:
            self._own.release(analyst)
            raise

    def leave(self, analyst: str) -> None:
        self._all.release("")
        self._own.release(analyst)

    def open(self, analyst: str | None = None) -> int:
        """Sessions open now (in this process): of one analyst, or of all."""
        return self._own.running(analyst) if analyst is not None else self._all.running()


# -- the allocator ------------------------------------------------------------------------------------

TRIM_THRESHOLD = 32 << 20       # bytes of freed memory an allocator arena keeps for reuse
MMAP_THRESHOLD = 16 << 20       # allocations from this size on get their own mapping


def tune_allocator() -> bool:
    """In a `dpsql serve` process: let glibc's malloc keep freed memory for reuse instead of
    handing it back to the kernel after every query.

    A grouped private query simulates its answers' accuracy on arrays of several MB (numpy;
    postprocess.simulated_half_widths), allocated and freed within the query. With glibc's
    defaults such blocks are mapped and unmapped, or trimmed off the heap, each time, and every
    page is faulted in again on the next query: about 1 ms of CPU a grouped query, most of it in
    the server's worker threads, whose arenas glibc trims most eagerly (the proxy benchmark's
    avg_by_state). Keeping up to TRIM_THRESHOLD free per arena (glibc has at most 8 arenas a
    core) bounds what the process holds on to, independently of any table's size.

    Only the server does this (a process dpsql owns); a program using dpsql as a library keeps
    its own allocator settings (glibc reads MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_
    from the environment). Returns whether the settings took (False off glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3          # <malloc.h>
    return mallopt(m_mmap_threshold, MMAP_THRESHOLD) == 1 and mallopt(m_trim_threshold, TRIM_THRESHOLD) == 1


# -- the worker pool ----------------------------------------------------------------------------------

class Workers(concurrent.futures.Executor):
    """A thread pool like ThreadPoolExecutor, but of daemon threads that the interpreter does not
    join at exit, and with a bounded wait for running work (`wait(timeout)`).

    ThreadPoolExecutor's threads are joined when the interpreter exits, so one query that ignores
    its cancel (a C call that never returns, an answer held by [timing] floor, up to 600 s) would
    keep a stopped server's process alive. Here shutdown cancels what has not started, waits
    as long as the caller chooses, and goes on."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "dpsql-q"):
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._all_done = threading.Condition(self._lock)
        self._shutdown = False
        self._count = itertools.count(1)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            fut: concurrent.futures.Future = concurrent.futures.Future()
            self._queue.put((fut, fn, args, kwargs))
            if not self._idle.acquire(timeout=0) and len(self._threads) < self.max_workers:
                t = threading.Thread(target=self._work, name=f"{self._prefix}_{next(self._count)}", daemon=True)
                self._threads.append(t)
                t.start()
        return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)          # wake the next thread too
                return
            fut, fn, args, kwargs = item
            del item
            if fut.set_running_or_notify_cancel():
                with self._lock:
                    self._busy += 1
                try:
                    result = fn(*args, **kwargs)
                except BaseException as err:  # noqa: BLE001 - handed to the waiter
                    fut.set_exception(err)
                else:
                    fut.set_result(result)
                finally:
                    with self._lock:
                        self._busy -= 1
                        if self._busy == 0:
                            self._all_done.notify_all()
                del fut, fn, args, kwargs
            with self._lock:
                if self._shutdown:
                    continue
            self._idle.release()

    def busy(self) -> int:
        """Tasks running now."""
        with self._lock:
            return self._busy

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the running tasks; True if none is left."""
        end = time.monotonic() + max(0.0, timeout)
        with self._lock:
            while self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._all_done.wait(left)
            return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new tasks; with cancel_futures, queued ones are cancelled. `wait` waits for the
        running ones without a bound (Server.close uses wait=False and a bounded `wait()`)."""
        with self._lock:
            self._shutdown = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        self._queue.put(None)
        if wait:
            for t in list(self._threads):
                t.join()


# -- the catalog's watchdog ---------------------------------------------------------------------------

class Watchdog:
    """Interrupts one running catalog query at its deadline or on cancel().

    DuckDB has no statement timeout, so a thread calls the connection's interrupt() from outside.
    An interrupt() that arrives just before the query starts is lost (DuckDB clears the flag when
    a query begins), so once triggered the watchdog repeats it every 50 ms until the query ends.

        with Watchdog(cursor.interrupt, timeout) as dog:
            cursor.execute(...)
        dog.reason   # None, "timeout" or "cancel"
    """

    _REPEAT = 0.05

    def __init__(self, interrupt: Callable[[], None], timeout: float):
        self._interrupt = interrupt
        self._deadline = time.monotonic() + timeout
        self._cond = threading.Condition()
        self._done = False
        self.reason: str | None = None
        self._thread = threading.Thread(target=self._watch, name="dpsql-catalog-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """From any thread: stop the query (CancelRequest, disconnect, shutdown)."""
        with self._cond:
            if self._done:
                return
            if self.reason is None:
                self.reason = "cancel"
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._done:
                if self.reason is None:
                    left = self._deadline - time.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                        continue
                    self.reason = "timeout"
                try:
                    self._interrupt()
                except Exception:     # noqa: BLE001 - a closed connection has nothing to stop
                    pass
                self._cond.wait(self._REPEAT)
