"""`dpsql serve --workers N`: one listening socket, N server processes.

One Python process answers at most about one core's worth of queries: the parse, the plan
lookup, the ledger charge, the noise and the wire protocol all run under its GIL. Several
processes use several cores. The shape is the classic pre-fork server's, with what dpsql needs
on top:

- The **supervisor** (this module's `Supervisor`, the process `dpsql serve` starts as) binds the
  listening socket, starts N **worker processes** and hands each accepted connection to the next
  worker in turn, as a file descriptor over a private socket pair (SCM_RIGHTS). It never reads a
  byte a client sends. It restarts a worker that dies and, on SIGINT or SIGTERM, stops accepting
  and stops the workers (each closes its clients as a one-process server does).
- Each **worker** is an ordinary `Server` (server.py) on its own `Backend`: its own engine
  connections, sessions and plan cache. It exits when its supervisor goes away.
- What must hold **over all processes** is shared through the kernel and the disk, never through
  one process's memory:
  - the privacy ledger and the repeat-answer cache: one SQLite file, whose transactions
    serialise charges from every process (dpsql/ledger/; group commit batches within a process);
  - each analyst's [server] max_concurrent_queries: `SharedQuerySlots` (limits.py), flock(2)
    on files in the supervisor's private runtime directory (mode 0700), which the kernel
    releases when a process dies;
  - cancel requests: a client's cancel arrives on a new connection, which may go to another
    worker than the one running its query. A worker's backend keys carry its index in the pid's
    high bits (`worker_pid`); a worker that receives a CancelRequest for another sends the
    (pid, secret) pair to the supervisor, which passes it to the owner, which checks the secret
    as usual. Nothing is answered to a CancelRequest, as in PostgreSQL, so the routing tells a
    client nothing.
  - the audit log: one O_APPEND write per line from any process (dpsql.ledger.audit.AuditLog).

Messages on a worker's socket pair (SOCK_SEQPACKET: each send is one message):
  supervisor -> worker: b"A" with one descriptor (a new client), b"C" + pid + secret (a cancel);
  worker -> supervisor: b"R" (ready: its Backend is open), b"C" + pid + secret (a cancel for
  another worker).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from dpsql.errors import Error
from dpsql.frontends.pgwire.limits import tune_allocator
from dpsql.frontends.pgwire.server import SHUTDOWN_TIMEOUT, Server
from dpsql.backend import Backend

log = logging.getLogger("dpsql.server")

MAX_WORKERS = 64
_INDEX_SHIFT = 24                    # pid = (index + 1) << 24 | 24 random bits: positive, < 2**31
_CANCEL = struct.Struct("!ii")
READY_TIMEOUT = 120.0                # seconds a worker has to open its Backend
STOP_GRACE = 5.0                     # beyond the workers' own shutdown timeout, before SIGKILL
_RESTARTS = 5                        # a worker dying this often within _RESTART_WINDOW stops the server
_RESTART_WINDOW = 60.0


def worker_pid(index: int, low: int) -> int:
    """The backend pid a worker gives a connection: its index in the high bits."""
    if not 0 <= index < MAX_WORKERS or not 0 <= low < 1 << _INDEX_SHIFT:
        raise ValueError("worker index or pid out of range")
    return (index + 1) << _INDEX_SHIFT | low


def pid_worker(pid: int) -> int | None:
    """The index of the worker that gave this pid, or None if no worker could have."""
    index = (pid >> _INDEX_SHIFT) - 1
    return index if 0 <= index < MAX_WORKERS else None


@dataclass
class WorkerLink:
    """A worker's end of its socket pair with the supervisor."""
    sock: socket.socket
    index: int
    runtime_dir: str
    port: int

    def ready(self) -> None:
        self.sock.sendall(b"R")

    def pid(self, low: int) -> int:
        """A backend pid for a connection of this worker (worker_pid)."""
        return worker_pid(self.index, low)

    @staticmethod
    def owner(pid: int) -> int | None:
        """The index of the worker whose connection `pid` is (pid_worker)."""
        return pid_worker(pid)

    def forward_cancel(self, pid: int, secret: int) -> None:
        """Best effort, as PostgreSQL's cancel is: a full or closed pipe drops the request."""
        try:
            self.sock.send(b"C" + _CANCEL.pack(pid, secret), socket.MSG_DONTWAIT)
        except OSError as err:
            log.warning("cancel request for connection %d not forwarded: %s", pid, err.strerror or err)

    @staticmethod
    def cancel_message(msg: bytes) -> tuple[int, int] | None:
        if len(msg) == 1 + _CANCEL.size and msg[:1] == b"C":
            return _CANCEL.unpack(msg[1:])
        return None


# -- the supervisor -------------------------------------------------------------------------------------

@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen
    sock: socket.socket
    ready: bool = False


class WorkerFailed(RuntimeError):
    """A worker could not start, or kept dying."""


class Supervisor:
    """Binds host:port, runs `count` worker processes and hands them the connections.

        sup = Supervisor(config, 4, "127.0.0.1", 6432)
        port = sup.start()          # every worker is ready, or WorkerFailed
        sup.serve()                 # until SIGINT/SIGTERM (or stop() from a signal handler)
        sup.close()

    `config` is what each worker needs to build its Backend and Server (JSON: target, policy,
    auth, max_message_bytes, startup_timeout); it goes to the worker on its stdin, never on a
    command line other users can read.
    """

    def __init__(self, config: dict, count: int, host: str, port: int):
        if not 1 <= count <= MAX_WORKERS:
            raise ValueError(f"the number of workers must be from 1 to {MAX_WORKERS}")
        self.config, self.count, self.host, self.port = dict(config), count, host, port
        self.workers: list[_Worker | None] = [None] * count
        self.runtime_dir = ""
        self._listen: socket.socket | None = None
        self._sel = selectors.DefaultSelector()
        self._next = 0
        self._stopping = False
        self._wake_r = self._wake_w = -1
        self._deaths: list[float] = []
        self.failure: str | None = None

    # -- lifecycle
    def start(self, timeout: float = READY_TIMEOUT) -> int:
        self.runtime_dir = tempfile.mkdtemp(prefix="dpsql-serve-")      # mode 0700
        try:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            self._listen = socket.create_server((self.host, self.port), family=family, backlog=1024)
            self._listen.setblocking(False)
            self.port = self._listen.getsockname()[1]
            self._sel.register(self._listen, selectors.EVENT_READ, "accept")
            log.info("starting %d worker processes (runtime directory %s)", self.count, self.runtime_dir)
            for i in range(self.count):
                self._spawn(i)
            deadline = time.monotonic() + timeout
            while not all(w is not None and w.ready for w in self.workers):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerFailed(f"the worker processes were not ready within {timeout:g} s")
                for key, _ in self._sel.select(min(left, 0.2)):
                    if isinstance(key.data, _Worker):
                        self._from_worker(key.data)
                for w in self.workers:
                    if w is not None and w.proc.poll() is not None:
                        raise WorkerFailed(f"worker {w.index} exited with code {w.proc.returncode} before it "
                                           f"was ready (its error is above)")
        except BaseException:
            self.close()
            raise
        return self.port

    def serve(self) -> None:
        """Accept and hand over connections, route cancels, restart dead workers; return on a
        signal (SIGINT, SIGTERM) or when workers keep dying (`failure` says why)."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        old_fd = signal.set_wakeup_fd(self._wake_w)
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not self._stopping:
                for key, _ in self._sel.select(0.5):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            os.read(self._wake_r, 512)
                        except BlockingIOError:
                            pass
                    elif isinstance(key.data, _Worker):
                        self._from_worker(key.data)
                self._reap()
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        self._stopping = True

    def _on_signal(self, signum, frame) -> None:
        self._stopping = True

    def close(self, grace: float | None = None) -> None:
        """Stop accepting, SIGTERM every worker, wait for them (their own shutdown timeout and
        STOP_GRACE), SIGKILL what is left, remove the runtime directory."""
        self._stopping = True
        if self._listen is not None:
            try:
                self._sel.unregister(self._listen)
            except (KeyError, ValueError):
                pass
            self._listen.close()
            self._listen = None
        live = [w for w in self.workers if w is not None]
        for w in live:
            if w.proc.poll() is None:
                try:
                    w.proc.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + (SHUTDOWN_TIMEOUT + STOP_GRACE if grace is None else grace)
        for w in live:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop in time; killing it", w.index)
                w.proc.kill()
                w.proc.wait()
            self._drop(w)
        self.workers = [None] * self.count
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    self._sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                os.close(fd)
        self._wake_r = self._wake_w = -1
        if self.runtime_dir:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = ""

    # -- workers
    def _spawn(self, index: int) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            config = {**self.config, "index": index, "runtime_dir": self.runtime_dir, "host": self.host,
                      "port": self.port}
            proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.pgwire.workers", str(theirs.fileno())],
                                    stdin=subprocess.PIPE, pass_fds=(theirs.fileno(),))
            try:
                proc.stdin.write(json.dumps(config).encode())
                proc.stdin.close()
            except OSError:
                pass             # it died at once: _reap or start() sees its exit code
        finally:
            theirs.close()
        mine.setblocking(False)
        w = _Worker(index, proc, mine)
        self.workers[index] = w
        self._sel.register(mine, selectors.EVENT_READ, w)

    def _drop(self, w: _Worker) -> None:
        try:
            self._sel.unregister(w.sock)
        except (KeyError, ValueError):
            pass
        w.sock.close()

    def _reap(self) -> None:
        now = time.monotonic()
        for i, w in enumerate(self.workers):
            if w is None or w.proc.poll() is None:
                continue
            self._drop(w)
            self.workers[i] = None
            if self._stopping:
                continue
            self._deaths = [t for t in self._deaths if now - t < _RESTART_WINDOW] + [now]
            if len(self._deaths) > _RESTARTS:
                self.failure = (f"worker processes died {len(self._deaths)} times within "
                                f"{_RESTART_WINDOW:g} s; stopping")
                log.error("%s", self.failure)
                self._stopping = True
                return
            log.warning("worker %d exited with code %s; starting it again (its clients were disconnected)",
                        i, w.proc.returncode)
            self._spawn(i)

    def _from_worker(self, w: _Worker) -> None:
        while True:
            try:
                msg = w.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg = b""
            if not msg:                       # the worker is gone: _reap restarts it
                try:
                    self._sel.unregister(w.sock)
                except (KeyError, ValueError):
                    pass
                return
            if msg == b"R":
                w.ready = True
                continue
            cancel = WorkerLink.cancel_message(msg)
            if cancel is not None:
                index = pid_worker(cancel[0])
                owner = self.workers[index] if index is not None and index < self.count else None
                if owner is not None and owner.ready:
                    try:
                        owner.sock.send(msg, socket.MSG_DONTWAIT)
                    except OSError:
                        pass                  # best effort, as PostgreSQL's cancel

    def _accept(self) -> None:
        assert self._listen is not None
        for _ in range(64):
            try:
                conn, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:            # EMFILE and the like: the client sees a closed connection
                log.warning("accept failed: %s", err.strerror or err)
                return
            try:
                self._hand(conn)
            finally:
                conn.close()                  # the worker has its own descriptor now

    def _hand(self, conn: socket.socket) -> None:
        for _ in range(self.count):
            w = self.workers[self._next % self.count]
            self._next += 1
            if w is None or not w.ready:
                continue
            try:
                socket.send_fds(w.sock, [b"A"], [conn.fileno()], socket.MSG_DONTWAIT)
                return
            except (BlockingIOError, InterruptedError):
                continue                      # this worker has a backlog; try the next
            except OSError:
                w.ready = False               # dying: _reap restarts it
        log.warning("no worker could take a new connection; closing it")


# -- a worker ---------------------------------------------------------------------------------------

def worker_main(argv: list[str]) -> int:
    """A worker process: `python -m dpsql.frontends.pgwire.workers FD`, its config on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the supervisor decides when to stop (SIGTERM)
    sock = socket.socket(fileno=int(argv[0]))
    config = json.loads(sys.stdin.read())
    index = int(config["index"])
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format=f"%(asctime)s %(name)s[{index}] %(levelname)s %(message)s")
    tune_allocator()

    try:
        backend = Backend(config["target"], config["policy"])
    except Error as err:
        print(f"dpsql: worker {index}: {err}", file=sys.stderr)
        return 1
    link = WorkerLink(sock, index, config["runtime_dir"], int(config["port"]))

    async def main() -> bool:
        server = Server(backend, host=config["host"], port=link.port, auth=config.get("auth"),
                        max_message_bytes=config.get("max_message_bytes"),
                        startup_timeout=float(config.get("startup_timeout", 30.0)), link=link)
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        link.ready()
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.orphaned.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for t in waiters:
            t.cancel()
        await server.close()
        return server.orphaned.is_set()

    try:
        orphaned = asyncio.run(main())
    finally:
        backend.close()
    if orphaned:      # the supervisor died without cleaning up (kill -9): remove its runtime directory
        shutil.rmtree(link.runtime_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
