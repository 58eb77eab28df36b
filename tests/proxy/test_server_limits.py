"""Issue 12, server resources: no analyst can deny service to others.

Catalog queries (answered by the emulated catalog on the server's own DuckDB) are bounded:
unbounded functions are refused before anything runs, every one has a time and a row limit, and
CancelRequest, disconnect and shutdown stop them. Each analyst has at most
[server] max_concurrent_queries statements running over all their connections. Shutdown waits
for busy workers only so long.

"Would run for minutes" below is a cross join of five copies of pg_attribute (about 10^15 rows):
only an interrupt ends it within the test's deadlines.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import psycopg
import pytest

from dpsql.errors import QueryRejected
from dpsql.frontends.pgwire.catalog_sql import classify
from tests.proxy.conftest import (
    PASSWORD,
    SlowEngine,
    raw_connect,
    start_proxy,
    wait_for,
)
from tests.proxy import wire
from tests.proxy.wire import ScramClient
from tests.proxy.wire import read_messages as _read

FOREVER = ("SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_attribute c, pg_attribute d, "
           "pg_attribute e")
DEADLINE = 60.0         # generous: a loaded 2-core machine; an interrupted query stops in well under 1 s


# -- helpers ----------------------------------------------------------------------------------------

class Background:
    """One statement on its own connection in a thread; .result() is (value or None, error or None)."""

    def __init__(self, dsn: str, sql: str):
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.sql = sql
        self.value = self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self.conn.execute(self.sql).fetchall()
        except Exception as err:       # noqa: BLE001 - inspected by the test
            self.error = err

    def result(self, timeout: float = DEADLINE):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout} s: {self.sql[:60]}"
        return self.value, self.error

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:     # noqa: BLE001
            pass


def running(proxy, user: str) -> int:
    """How many of the user's connections have a statement on a worker now."""
    return sum(1 for c in list(proxy.server.server.clients.values()) if c.user == user and c.running)


def connected(proxy, user: str) -> int:
    return sum(1 for c in list(proxy.server.server.clients.values()) if c.user == user)


def sqlstate(err) -> str | None:
    return getattr(err, "sqlstate", None)


def raw_login(port: int, user: str) -> socket.socket:
    s = raw_connect(port)
    s.sendall(wire.startup_message({"user": user, "database": "test"}))
    _read(s, until="R")
    c = ScramClient(PASSWORD)
    first = c.first()
    s.sendall(wire.frontend("p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
    cont = _read(s, until="R")[-1][1]
    s.sendall(wire.frontend("p", c.final(cont[4:])))
    assert _read(s)[-1] == ("Z", b"I")
    return s


@pytest.fixture(scope="module")
def limited(people_db, tmp_path_factory):
    """A proxy whose catalog queries only an interrupt stops (catalog_timeout 600 s), with a row
    limit of 50, two queries per analyst refusing a third at once (query_wait 0), and private
    answers held 2 s by the release timing."""
    p = start_proxy(people_db, tmp_path_factory.mktemp("limited"), policy={
        "server": {"catalog_timeout": 600, "catalog_max_rows": 50, "max_concurrent_queries": 2, "query_wait": 0},
        "timing": {"floor": 2.0}})
    yield p
    p.server.stop()
    p.backend.close()


# -- 1. unbounded functions are refused before anything runs ----------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",     # the reported attack
    "SELECT count(*) FROM generate_series(1, 100000000000) a",
    "SELECT generate_series(1, 10000000000)",
    "SELECT * FROM generate_series(0, array_upper(current_schemas(false), 1), -1) s",
    "SELECT generate_series(-100000000000, array_upper(current_schemas(false), 1))",
    "SELECT count(*) FROM range(1000000000000)",
    "SELECT unnest(generate_series(1, 1000000000))",
    "SELECT unnest(string_to_array(repeat('x,', 100000000), ','))",
    "SELECT regexp_split_to_table('a b', ' ')",
    "SELECT repeat('x', 2000000000)",
    "SELECT lpad('x', 2000000000)",
    "SELECT rpad('x', 2000000000, 'y')",
    "SELECT format('%1000000000s', 'x')",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t",
    ("SELECT relname FROM pg_class WHERE relname IN (WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL "
     "SELECT n + 1 FROM t) SELECT 'x' FROM t)"),
    "SELECT replace(attname, 'a', 'bbbbbbbbbb') FROM pg_attribute",
    "SELECT replace((SELECT string_agg(attname, '') FROM pg_attribute), 'a', 'bb')",
    "SELECT string_agg(attname, repeat('x', 1000)) FROM pg_attribute",
    "SELECT array_to_string(array_agg(attname), '" + "x" * 100 + "') FROM pg_attribute",
    "SELECT concat_ws('" + "x" * 100 + "', attname, attname) FROM pg_attribute",
    "SELECT length('" + "x" * 5000 + "')",
])
def test_unbounded_catalog_queries_are_refused(sql):
    with pytest.raises(QueryRejected) as err:
        classify(sql)
    assert err.value.sqlstate == "42501"
    msg = str(err.value)
    assert "is not allowed" in msg and "x" * 50 not in msg


@pytest.mark.parametrize("sql", [
    # what the drivers send (observed.json has them whole; test_catalog runs them)
    ("SELECT string_agg(attname, ', ') FROM pg_catalog.generate_series(0, pg_catalog.array_upper("
     "'{1,2}'::pg_catalog.int2[], 1)) s, pg_catalog.pg_attribute WHERE attnum = s"),
    "SELECT s.r FROM generate_series(1, array_upper(current_schemas(false), 1)) AS s(r)",
    "SELECT replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_')",
    "SELECT pg_catalog.array_to_string(d.datacl, E'\\n') FROM pg_catalog.pg_database d",
    "SELECT unnest(indkey), generate_subscripts(indkey, 1) FROM pg_catalog.pg_index",
    "SELECT count(*) FROM pg_attribute a, pg_attribute b",      # joins stay: the time limit bounds them
])
def test_bounded_forms_drivers_use_are_answered(sql):
    assert classify(sql).kind == "catalog"


def test_refusal_through_the_proxy(limited):
    with psycopg.connect(limited.dsn("user0"), autocommit=True) as c:
        with pytest.raises(psycopg.Error) as err:
            c.execute("SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b")
        assert sqlstate(err.value) == "42501" and "generate_series" in str(err.value)
        assert c.execute("SELECT 1").fetchone() == (1,)


# -- 2. time and row limits -------------------------------------------------------------------------

def test_catalog_time_limit(people_db, tmp_path):
    p = start_proxy(people_db, tmp_path, policy={"server": {"catalog_timeout": 1}})
    try:
        job = Background(p.dsn("alice"), FOREVER)
        _, err = job.result()
        assert isinstance(err, psycopg.errors.QueryCanceled), err
        assert "statement timeout" in str(err) and "catalog_timeout" in str(err)
        assert job.conn.execute("SELECT relname FROM pg_class WHERE relname = 'people'").fetchone() == ("people",)
        job.close()
    finally:
        p.server.stop()
        p.backend.close()


def test_catalog_row_limit_refuses_never_truncates(limited):
    with psycopg.connect(limited.dsn("user1"), autocommit=True) as c:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as err:
            c.execute("SELECT attname FROM pg_attribute")
        assert sqlstate(err.value) == "54000" and "catalog_max_rows" in str(err.value)
        assert len(c.execute("SELECT attname FROM pg_attribute LIMIT 50").fetchall()) == 50
        # the extended protocol too (psycopg prepares with binary results when asked)
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            c.execute("SELECT attname FROM pg_attribute WHERE attnum > %s", [0], prepare=True)


# -- 3. CancelRequest, disconnect and shutdown stop a running catalog query -------------------------

def test_cancel_request_stops_a_catalog_query(limited):
    job = Background(limited.dsn("user2"), FOREVER)
    try:
        assert wait_for(lambda: running(limited, "user2") == 1, timeout=DEADLINE)
        time.sleep(0.2)
        # cancel_safe: the blocking cancel() of psycopg's C implementation keeps the GIL, which
        # the in-process server needs to accept the CancelRequest
        (job.conn.cancel_safe if hasattr(job.conn, "cancel_safe") else job.conn.cancel)()
        _, err = job.result()
        assert isinstance(err, psycopg.errors.QueryCanceled), err
        assert running(limited, "user2") == 0
        assert job.conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        job.close()


def test_disconnect_stops_a_catalog_query(limited):
    s = raw_login(limited.port, "user3")
    s.sendall(wire.query_message(FOREVER))
    assert wait_for(lambda: running(limited, "user3") == 1, timeout=DEADLINE)
    s.close()
    assert wait_for(lambda: connected(limited, "user3") == 0, timeout=DEADLINE)
    assert limited.server.server.slots.running("user3") == 0


def test_disconnect_stops_a_private_query(people_db, tmp_path):
    """A private query that would run for ten minutes (SlowEngine) ends when its client goes."""
    p = start_proxy(people_db, tmp_path)
    engines = []
    original = p.backend.session

    def session(analyst, **kw):
        s = original(analyst, **kw)
        if isinstance(s.engine, SlowEngine):
            s.engine.delay = 600
            engines.append(s.engine)
        return s
    p.backend.session = session
    try:
        s = raw_login(p.port, "slow")
        s.sendall(wire.query_message("SELECT COUNT(*) FROM people"))
        assert wait_for(lambda: engines and engines[0].running.is_set(), timeout=DEADLINE)
        s.close()
        assert wait_for(lambda: not engines[0].running.is_set() and connected(p, "slow") == 0, timeout=DEADLINE)
        assert wait_for(lambda: p.open_sessions() == 0, timeout=DEADLINE)
    finally:
        p.server.stop()
        p.backend.close()


def test_shutdown_stops_running_queries(people_db, tmp_path):
    """Server.close interrupts a catalog query and a private one, and returns promptly."""
    p = start_proxy(people_db, tmp_path, policy={"server": {"catalog_timeout": 600}})
    engines = []
    original = p.backend.session

    def session(analyst, **kw):
        s = original(analyst, **kw)
        if isinstance(s.engine, SlowEngine):
            s.engine.delay = 600
            engines.append(s.engine)
        return s
    p.backend.session = session
    jobs = []
    try:
        jobs = [Background(p.dsn("alice"), FOREVER), Background(p.dsn("slow"), "SELECT COUNT(*) FROM people")]
        assert wait_for(lambda: running(p, "alice") == 1 and running(p, "slow") == 1, timeout=DEADLINE)
        t0 = time.monotonic()
        p.server.stop()
        assert time.monotonic() - t0 < DEADLINE
        for job in jobs:
            _, err = job.result()
            assert isinstance(err, psycopg.Error)          # cancelled, or the connection closed
        assert not engines[0].running.is_set()
        assert p.server.server.executor.busy() == 0
        assert p.open_sessions() == 0
    finally:
        for job in jobs:
            job.close()
        p.server.stop()
        p.backend.close()


class StuckEngine(SlowEngine):
    """run() blocks until the test lets it go; interrupt() does nothing (a query that ignores its
    cancel, or an answer held by the release timing)."""

    def __init__(self, inner, gate: threading.Event):
        super().__init__(inner, 0)
        self.gate = gate

    def run(self, sql, params=None, **checks):
        self.running.set()
        try:
            self.gate.wait(600)
        finally:
            self.running.clear()
        return self.inner.run(sql, params, **checks)

    def interrupt(self) -> None:
        pass


def test_shutdown_does_not_wait_forever_on_a_busy_worker(people_db, tmp_path):
    gate = threading.Event()
    p = start_proxy(people_db, tmp_path, shutdown_timeout=1.0)
    engines = []
    original = p.backend.session

    def session(analyst, **kw):
        s = original(analyst, **kw)
        if isinstance(s.engine, SlowEngine):
            s.engine = StuckEngine(s.engine.inner, gate)
            engines.append(s)
        return s
    p.backend.session = session
    job = None
    try:
        job = Background(p.dsn("slow"), "SELECT COUNT(*) FROM people")
        assert wait_for(lambda: engines and engines[0].engine.running.is_set(), timeout=DEADLINE)
        t0 = time.monotonic()
        p.server.stop()
        assert time.monotonic() - t0 < 30
        assert engines[0].engine.running.is_set() and not engines[0].closed   # still busy: left running
        gate.set()                                                            # it finishes...
        assert wait_for(lambda: engines[0].closed, timeout=DEADLINE)          # ...and its session is closed
    finally:
        gate.set()
        if job is not None:
            job.close()
        p.server.stop()
        p.backend.close()


# -- 4. per-analyst concurrent queries ---------------------------------------------------------------

def test_concurrent_queries_per_analyst(limited):
    """Two statements running fill user4's two slots (taken here by hand: a private answer held
    by the release timing holds none, tests/proxy/test_query_queue.py): a third statement from
    another connection of user4 is refused at once (53400, query_wait 0) and charges nothing;
    housekeeping still works, another analyst is not affected; the slots come back, and two
    private queries then run and are charged."""
    dsn = limited.dsn("user4")
    slots = limited.server.server.slots
    with psycopg.connect(dsn, autocommit=True) as c:
        spent = c.execute("SHOW dpsql.budget").fetchone()[1]
        eps = c.execute("SHOW dpsql.epsilon").fetchone()[0]
        slots.acquire("user4")
        slots.acquire("user4")
        try:
            assert slots.running("user4") == 2
            for sql in ("SELECT COUNT(*) FROM people WHERE age > 50",              # private
                        "SELECT relname FROM pg_class WHERE relname = 'people'",    # catalog
                        "SELECT * FROM regions"):                                   # public
                with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as err:
                    c.execute(sql)
                assert sqlstate(err.value) == "53400" and "max_concurrent_queries" in str(err.value)
            c.execute("SET application_name = 'still here'")                         # housekeeping is not counted
            assert c.execute("SHOW application_name").fetchone() == ("still here",)
            with psycopg.connect(limited.dsn("user5"), autocommit=True) as other:   # another analyst
                assert other.execute("SELECT relname FROM pg_class WHERE relname = 'people'").fetchone()
        finally:
            slots.release("user4")
            slots.release("user4")
        jobs = [Background(dsn, "SELECT COUNT(*) FROM people WHERE age > 30"),
                Background(dsn, "SELECT COUNT(*) FROM people WHERE age > 40")]
        try:
            for job in jobs:
                value, err = job.result()
                assert err is None and value
        finally:
            for job in jobs:
                job.close()
        assert wait_for(lambda: limited.server.server.slots.running("user4") == 0, timeout=DEADLINE)
        assert c.execute("SELECT relname FROM pg_class WHERE relname = 'people'").fetchone() == ("people",)
        now = c.execute("SHOW dpsql.budget").fetchone()[1]
        assert now == pytest.approx(spent + 2 * eps)                      # the refused one cost nothing


def test_failed_and_refused_statements_give_their_slot_back(limited):
    with psycopg.connect(limited.dsn("user6"), autocommit=True) as c:
        for sql in ("SELECT * FROM people",                                 # refused by the analysis
                    "SELECT count(*) FROM generate_series(1, 10)",          # refused by the catalog
                    "SELECT attname FROM pg_attribute",                     # over the row limit
                    "SELECT nonsense FROM",                                 # syntax error
                    "SELECT COUNT(*) FROM no_such_table"):
            for prepare in (False, True):
                with pytest.raises(psycopg.Error):
                    c.execute(sql, prepare=prepare)
        assert limited.server.server.slots.running("user6") == 0
        jobs = [Background(limited.dsn("user6"), "SELECT COUNT(*) FROM people WHERE age > 20"),
                Background(limited.dsn("user6"), "SELECT COUNT(*) FROM people WHERE age > 25")]
        try:
            for job in jobs:
                _, err = job.result()
                assert err is None                                          # both slots were free
        finally:
            for job in jobs:
                job.close()
    assert wait_for(lambda: limited.server.server.slots.running("user6") == 0, timeout=DEADLINE)


def test_sigterm_stops_dpsql_serve_with_a_catalog_query_running(people_db, tmp_path):
    """The `dpsql serve` SIGTERM path: the running catalog query is interrupted and the process
    exits cleanly, instead of waiting for the query (minutes) with every worker it holds."""
    import os
    import signal
    import subprocess
    import sys

    from dpsql.demo import policy_toml
    from tests.conftest import policy_for
    from tests.proxy.conftest import _VERIFIER

    pol = tmp_path / "policy.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)) + f'\n[server]\ncatalog_timeout = 600\n'
                   f'\n[analysts.alice]\npassword = "{_VERIFIER}"\n')
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", people_db,
                             "--policy", str(pol), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    job = None
    try:
        line, deadline = "", time.monotonic() + DEADLINE
        while "dpsql serving" not in line and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
        assert "dpsql serving" in line, line
        dsn = f"host=127.0.0.1 port={port} user=alice password='{PASSWORD}' dbname=test sslmode=disable"
        job = Background(dsn, FOREVER)
        while "authenticated" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        time.sleep(1.0)                      # the query has reached the catalog
        assert job.thread.is_alive()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
        _, err = job.result()
        assert isinstance(err, psycopg.Error)
        rest = proc.stderr.read()
        assert "shutting down" in rest and "Traceback" not in rest
    finally:
        if job is not None:
            job.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_CHURN = """
import resource, sys, threading
import numpy as np
from dpsql.frontends.pgwire.limits import tune_allocator
tuned = sys.argv[1] == "1" and tune_allocator()
z = np.arange(4000.0)
out = []
def work():
    for i in range(60):
        if i == 10:
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        a = np.arange(51.0)[:, None] + z[None, :]          # 1.6 MB, as a grouped query's simulation
        b = np.abs(a - 1.0)
        c = np.where(np.isfinite(b), b, np.inf)
        np.partition(c, 3800, axis=1)
    out.append((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0) / 50)
t = threading.Thread(target=work)
t.start()
t.join()
print(int(tuned), out[0])
"""


def test_the_server_keeps_freed_memory_for_the_next_query():
    """tune_allocator (called by `dpsql serve` and its workers): a worker thread that allocates
    and frees a grouped query's simulation arrays (4 x 1.6 MB) again and again no longer faults
    their pages in each time. Each pass touches about 1,600 pages; with glibc's defaults a
    hundred or so of them are faulted in again on every pass (the premise, checked too)."""
    import subprocess
    import sys

    def faults(tune: bool) -> float:
        out = subprocess.run([sys.executable, "-c", _CHURN, "1" if tune else "0"], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out[0] == ("1" if tune else "0"), "tune_allocator did not take"
        return float(out[1])

    tuned, default = faults(True), faults(False)
    assert tuned < 20, tuned
    assert default > 10 * max(tuned, 1.0), (tuned, default)      # the premise: the defaults do fault


def test_connections_per_analyst_and_in_all(people_db, tmp_path):
    """Each session holds an engine connection, so one analyst could open connections until the
    database refuses everyone's. At most max_connections_per_analyst sessions of one analyst
    and max_connections in all are open: one more is refused at login (53300, FATAL), after
    authentication and before any session (or engine connection) is opened; a closed
    connection's place is free again once its session is closed."""
    p = start_proxy(people_db, tmp_path, policy={"server": {"max_connections": 5, "max_connections_per_analyst": 3}})
    conns = []
    try:
        def connect(user: str):
            c = psycopg.connect(p.dsn(user), autocommit=True)
            conns.append(c)
            return c

        def refused(user: str) -> str:
            opened = len(p.sessions)
            with pytest.raises(psycopg.OperationalError) as err:
                connect(user)
            assert len(p.sessions) == opened            # no session was opened for it
            assert "too many" in str(err.value), err.value
            fields = _login_error(p.port, user)         # libpq keeps no SQLSTATE of a failed login
            assert fields["C"] == "53300" and fields["S"] == "FATAL", fields
            assert len(p.sessions) == opened
            return fields["M"]

        alice = [connect("alice") for _ in range(3)]
        assert "at most 3 at once ([server] max_connections_per_analyst)" in refused("alice")
        bob = [connect("bob") for _ in range(2)]
        assert "at most 5 sessions at once ([server] max_connections)" in refused("carol")
        assert "max_connections" in refused("bob")
        assert _login_error(p.port, "alice", "wrong")["C"] == "28P01"     # a wrong password learns nothing more
        for c in alice + bob:
            assert c.execute("SELECT COUNT(*) FROM people WHERE age > 40").fetchone()[0] > 0
        alice[0].close()
        assert wait_for(lambda: p.server.server.connections.open("alice") == 2, timeout=DEADLINE)
        carol = connect("carol")                          # the freed place, for anyone
        assert carol.execute("SELECT COUNT(*) FROM people WHERE age > 41").fetchone()[0] > 0
        assert "max_connections" in refused("alice")
        for c in bob:
            c.close()
        assert wait_for(lambda: p.server.server.connections.open() == 3, timeout=DEADLINE)
        connect("alice")
        assert "max_connections_per_analyst" in refused("alice")
    finally:
        for c in conns:
            c.close()
        p.server.stop()
        p.backend.close()


def _login_error(port: int, user: str, password: str = PASSWORD) -> dict[str, str]:
    """The ErrorResponse fields a SCRAM login gets (or {} if it is admitted)."""
    s = raw_connect(port)
    try:
        s.sendall(wire.startup_message({"user": user, "database": "test"}))
        _read(s, until="R")
        c = ScramClient(password)
        first = c.first()
        s.sendall(wire.frontend("p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
        msgs = _read(s, until="R")
        if msgs[-1][0] == "E":
            return _fields(msgs[-1][1])
        s.sendall(wire.frontend("p", c.final(msgs[-1][1][4:])))
        for kind, body in _read(s):
            if kind == "E":
                return _fields(body)
        return {}
    finally:
        s.close()


def _fields(body: bytes) -> dict[str, str]:
    out = {}
    for part in body.split(b"\0"):
        if part:
            out[chr(part[0])] = part[1:].decode()
    return out


def test_sockets_that_never_log_in_are_capped(people_db, tmp_path):
    """Connections that send nothing hold a socket until the startup timeout. A process keeps at
    most max_connections + STARTUP_MARGIN sockets: the next is refused at once (FATAL 53300),
    and a place is free again as soon as one closes."""
    from dpsql.frontends.pgwire.server import STARTUP_MARGIN
    p = start_proxy(people_db, tmp_path, policy={"server": {"max_connections": 2, "max_connections_per_analyst": 2}})
    idle = []
    try:
        for _ in range(2 + STARTUP_MARGIN):
            idle.append(raw_connect(p.port))
        assert wait_for(lambda: len(p.server.server._tasks) == 2 + STARTUP_MARGIN, timeout=DEADLINE)
        extra = raw_connect(p.port)
        kind, body = _read(extra)[0]
        assert kind == "E" and _fields(body)["C"] == "53300" and "too many clients" in _fields(body)["M"]
        assert extra.recv(1) == b""                 # and closed
        extra.close()
        idle.pop().close()
        assert wait_for(lambda: len(p.server.server._tasks) == 1 + STARTUP_MARGIN, timeout=DEADLINE)
        with psycopg.connect(p.dsn("alice"), autocommit=True) as c:
            assert c.execute("SELECT COUNT(*) FROM people WHERE age > 50").fetchone()[0] > 0
    finally:
        for s in idle:
            s.close()
        p.server.stop()
        p.backend.close()
