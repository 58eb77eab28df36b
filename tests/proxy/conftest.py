"""The proxy on a free loopback port, in-process (its own event loop in a background thread).

`proxy` (per module): a ServerThread over the shared DuckDB people database with analysts alice,
bob, poor (a budget of one query) and slow* (their engine takes SLOW_SECONDS per query and can
be cancelled), all with the password PASSWORD. Every Session the backend opens is recorded so
tests can check they were closed.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field

import pytest

from dpsql.errors import QueryCanceled
from dpsql.frontends.pgwire.auth import make_verifier
from dpsql.frontends.pgwire.server import ServerThread
from dpsql.backend import Backend
from tests.conftest import policy_for

PASSWORD = "s3cret pw"
SLOW_SECONDS = 3.0
_VERIFIER = make_verifier(PASSWORD)
CI = os.environ.get("CI", "").lower() == "true"


class SlowEngine:
    """An engine whose run() waits SLOW_SECONDS first; interrupt() cancels that wait."""

    def __init__(self, inner, delay: float):
        self.inner, self.delay = inner, delay
        self._cancel = threading.Event()
        self.running = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, sql, params=None, *, before=None, **checks):
        """The wait comes after the budget is charged (inside the engine's transaction, where a
        real query's work is), so a cancelled slow query has been charged."""
        def charge_then_wait():
            if before is not None:
                before()
            self._cancel.clear()
            self.running.set()
            try:
                if self._cancel.wait(self.delay):
                    raise QueryCanceled("canceling statement due to user request: the query was cancelled")
            finally:
                self.running.clear()
        return self.inner.run(sql, params, before=charge_then_wait, **checks)

    def interrupt(self) -> None:
        if self.running.is_set():
            self._cancel.set()


@dataclass
class Proxy:
    server: ServerThread
    backend: Backend
    sessions: list = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    def dsn(self, user: str = "alice", password: str = PASSWORD, **extra) -> str:
        parts = {"host": "127.0.0.1", "port": self.port, "user": user, "password": password, "dbname": "test",
                 "sslmode": "disable", **extra}
        return " ".join(f"{k}='{v}'" for k, v in parts.items())

    def open_sessions(self) -> int:
        return sum(1 for s in self.sessions if not s.closed)


def analysts() -> dict:
    out = {name: {"password": _VERIFIER} for name in ("alice", "bob", "carol", "slow", "slow2")}
    out["poor"] = {"password": _VERIFIER, "epsilon": 0.5}
    for i in range(20):
        out[f"user{i}"] = {"password": _VERIFIER}
    return out


def start_proxy(people_db: str, tmp_path, **options) -> Proxy:
    pol = policy_for(tmp_path, analysts=analysts(), **options.pop("policy", {}))
    backend = Backend(people_db, pol)
    proxy = Proxy(None, backend)
    original = backend.session

    def session(analyst, **kw):
        s = original(analyst, **kw)
        if analyst.startswith("slow"):
            s.engine = SlowEngine(s.engine, SLOW_SECONDS)
        proxy.sessions.append(s)
        return s

    backend.session = session
    proxy.server = ServerThread(backend, **options).start()
    return proxy


@pytest.fixture(scope="module")
def proxy(people_db, tmp_path_factory):
    p = start_proxy(people_db, tmp_path_factory.mktemp("proxy"))
    yield p
    p.server.stop()
    p.backend.close()


def wait_for(predicate, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def raw_connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def recv_all(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (or the timeout)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    except (TimeoutError, ConnectionError):
        pass
    return out
