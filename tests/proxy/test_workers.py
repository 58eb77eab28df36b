"""`dpsql serve --workers N`: several server processes behind one port (issue 17).

What must hold over all the processes, tested through real connections to a real multi-process
server (a subprocess, as users start it):
- connections are handed to the workers in turn, and each worker answers private queries;
- the ledger is one: an analyst's budget is spent by queries on any process, and a query that
  would overspend is refused whichever process gets it;
- the repeat-answer cache is one: the same query on two processes gets the same noisy answer
  (otherwise asking each process once would average the noise away);
- [server] max_concurrent_queries holds per analyst over all processes (SharedQuerySlots);
- a CancelRequest reaches the query's process, whichever process received it;
- a worker killed with SIGKILL gives back its slots and is started again; SIGTERM stops all;
  a worker whose supervisor dies stops too.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from dpsql.demo import policy_toml
from dpsql.frontends.pgwire.limits import SharedQuerySlots, TooManyQueries
from dpsql.frontends.pgwire.workers import MAX_WORKERS, pid_worker, worker_pid
from tests.conftest import policy_for
from tests.proxy.conftest import wait_for

FOREVER = ("SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_attribute c, pg_attribute d, "
           "pg_attribute e")
DEADLINE = 60.0


class Served:
    """`dpsql serve --workers N` as a subprocess; its stderr lines collected in `lines`."""

    def __init__(self, people_db: str, tmp_path: Path, workers: int = 2, **policy):
        server = {"auth": "trust", "catalog_timeout": 600, **policy.pop("server", {})}
        pol = policy_for(tmp_path, server=server, **policy)
        path = tmp_path / "policy.toml"
        path.write_text(policy_toml(pol))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", people_db, "--policy", str(path),
             "--listen", f"127.0.0.1:{self.port}", "--workers", str(workers)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(DEADLINE):
            self.stop()
            raise AssertionError("dpsql serve --workers did not start:\n" + "".join(self.lines))

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if "dpsql serving" in line:
                self._ready.set()

    def connect(self, user: str = "alice") -> psycopg.Connection:
        return psycopg.connect(f"host=127.0.0.1 port={self.port} user={user} dbname=test sslmode=disable",
                               autocommit=True)

    def workers(self) -> list[int]:
        """The worker processes' pids (children of the supervisor)."""
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(stat[1]) == self.proc.pid:
                    out.append(int(p))
        return out

    def log_has(self, text: str, timeout: float = DEADLINE) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in list(self.lines)):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


class Running:
    """One statement in a thread on its own connection."""

    def __init__(self, conn: psycopg.Connection, sql: str):
        self.conn, self.value, self.error = conn, None, None
        self.thread = threading.Thread(target=self._run, args=(sql,), daemon=True)
        self.thread.start()

    def _run(self, sql: str) -> None:
        try:
            self.value = self.conn.execute(sql).fetchall()
        except Exception as err:        # noqa: BLE001 - inspected by the test
            self.error = err

    def result(self):
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the statement did not end"
        return self.value, self.error


def _cancel(port: int, pid: int, secret: int) -> None:
    """A CancelRequest on a new connection, as libpq sends it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack("!iiii", 16, 80877102, pid, secret))
        s.settimeout(10)
        assert s.recv(1) == b""           # the server closes without a reply


def _holding(runs: list, conns: list, probe) -> bool:
    """Whether every FOREVER statement in `runs` holds its slot, told by `probe` (a statement
    of the same analyst refused with 53400). A probe that took a slot just before a statement
    began makes that statement the refused one: it is started again."""
    for i, r in enumerate(runs):
        if not r.thread.is_alive():
            _, error = r.result()
            assert getattr(error, "sqlstate", None) == "53400", error
            runs[i] = Running(conns[i], FOREVER)
            return False
    return probe()


def _wait(pred, timeout: float = DEADLINE) -> bool:
    return wait_for(pred, timeout)


# -- units --------------------------------------------------------------------------------------------

def test_pids_name_their_worker():
    for index in (0, 1, 17, MAX_WORKERS - 1):
        for low in (0, 1, (1 << 24) - 1):
            pid = worker_pid(index, low)
            assert 0 < pid < 2**31 and pid_worker(pid) == index
    assert pid_worker(5) is None and pid_worker(2**31 - 1) is None
    with pytest.raises(ValueError):
        worker_pid(MAX_WORKERS, 0)


_HOLD = """
import sys, time
from dpsql.frontends.pgwire.limits import SharedQuerySlots
slots = SharedQuerySlots(int(sys.argv[2]), sys.argv[1])
for _ in range(int(sys.argv[3])):
    slots.acquire("alice")
print("held", flush=True)
time.sleep(600)
"""


def test_shared_slots_hold_over_processes_and_die_with_them(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path), "3", "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = SharedQuerySlots(3, tmp_path)
        mine.acquire("alice")                       # the third slot
        with pytest.raises(TooManyQueries):
            mine.acquire("alice")                   # two are held by the other process
        mine.acquire("bob")                         # another analyst's slots are their own
        mine.release("alice")
        mine.acquire("alice")
        with pytest.raises(TooManyQueries):
            mine.acquire("alice")
        holder.kill()                               # kill -9: the kernel drops its locks
        holder.wait()
        mine.acquire("alice")
        mine.acquire("alice")
        assert mine.running("alice") == 3 and mine.running() == 4
        with pytest.raises(TooManyQueries):
            mine.acquire("alice")
        for _ in range(3):
            mine.release("alice")
        assert mine.running("alice") == 0
    finally:
        holder.kill()
        holder.wait()
    assert not any("alice" in p.name for p in tmp_path.iterdir())     # names carry a hash only


# -- a real multi-process server ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(people_db, tmp_path_factory):
    s = Served(people_db, tmp_path_factory.mktemp("workers"), epsilon=2.0,
               server={"max_concurrent_queries": 2, "query_wait": 0})
    yield s
    assert s.stop() == 0
    assert "Traceback" not in "".join(s.lines)


def test_connections_go_to_the_workers_in_turn(served):
    conns = [served.connect("carol") for _ in range(4)]
    try:
        workers = [pid_worker(c.info.backend_pid) for c in conns]
        assert sorted(set(workers)) == [0, 1] and workers[0] != workers[1] and workers[:2] == workers[2:]
        for i, c in enumerate(conns):
            assert c.execute(f"SELECT COUNT(*) FROM people WHERE age > {i}").fetchone()[0] > 0
    finally:
        for c in conns:
            c.close()


def test_one_budget_over_all_workers(served):
    """epsilon 2 and 0.5 a query: exactly four distinct queries are answered, however they are
    spread over the processes, and the fifth is refused on each."""
    a, b = served.connect("dave"), served.connect("dave")
    try:
        assert pid_worker(a.info.backend_pid) != pid_worker(b.info.backend_pid)
        answered = 0
        for i in range(4):
            c = (a, b)[i % 2]
            c.execute(f"SELECT COUNT(*) FROM people WHERE age > {10 + i}").fetchone()
            answered += 1
        for c in (a, b):
            with pytest.raises(psycopg.Error) as err:
                c.execute("SELECT COUNT(*) FROM people WHERE age > 50").fetchone()
            assert err.value.sqlstate == "53000", err.value
        assert answered == 4
    finally:
        a.close()
        b.close()


def test_repeats_get_the_same_answer_on_every_worker(served):
    a, b = served.connect("erin"), served.connect("erin")
    try:
        assert pid_worker(a.info.backend_pid) != pid_worker(b.info.backend_pid)
        sql = "SELECT SUM(income) FROM people WHERE age > 30"
        first = a.execute(sql).fetchone()[0]
        assert b.execute(sql).fetchone()[0] == first
        assert a.execute(sql).fetchone()[0] == first
    finally:
        a.close()
        b.close()


def test_query_slots_hold_over_workers_and_cancel_finds_its_worker(served):
    """Two FOREVER catalog queries of one analyst, one on each process, take both slots: a third
    statement is refused (53400) on either process. A CancelRequest, which arrives on a new
    connection and so on whichever process the supervisor hands it to, stops each query from
    the other process; one with a wrong secret stops nothing."""
    conns = [served.connect("frank") for _ in range(3)]
    try:
        owners = [pid_worker(c.info.backend_pid) for c in conns]
        assert owners[0] != owners[1] and owners[2] == owners[0]
        runs = [Running(c, FOREVER) for c in conns[:2]]

        def refused(c, sql: str) -> bool:
            try:
                c.execute(sql).fetchall()
            except psycopg.Error as err:
                assert err.sqlstate == "53400", err
                return True
            return False

        assert _wait(lambda: _holding(runs, conns, lambda: refused(conns[2], "SELECT 1")))
        fourth = served.connect("frank")                              # on owners[1]'s process
        assert pid_worker(fourth.info.backend_pid) == owners[1]
        assert refused(fourth, "SELECT COUNT(*) FROM people WHERE age > 70")
        fourth.close()
        other = served.connect("grace")        # other analysts are not limited by frank's slots
        assert other.execute("SELECT COUNT(*) FROM people WHERE age > 71").fetchone()[0] > 0
        other.close()
        for c, run, owner in zip(conns[:2], runs, owners):
            pid = c.info.backend_pid
            for _ in range(2):     # a full turn of the two workers: one of them forwards it
                _cancel(served.port, pid, int.from_bytes(os.urandom(4), "big") >> 1)
            time.sleep(0.5)
            assert run.thread.is_alive(), "a cancel with a wrong secret stopped a query"
            probe = served.connect("frank")
            if pid_worker(probe.info.backend_pid) != owner:
                probe.close()
                probe = served.connect("frank")
            assert pid_worker(probe.info.backend_pid) == owner
            probe.close()
            c.cancel()                         # the next connection: the other process
            value, error = run.result()
            assert value is None and getattr(error, "sqlstate", None) == "57014", error
            assert served.log_has(f"cancel request for connection {pid}: passed to worker {owner}")
        assert conns[0].execute("SELECT COUNT(*) FROM people WHERE age > 72").fetchone()[0] > 0
        assert conns[1].execute("SELECT COUNT(*) FROM people WHERE age > 73").fetchone()[0] > 0
    finally:
        for c in conns:
            c.close()


def test_a_killed_worker_is_replaced_and_gives_back_its_slots(people_db, tmp_path):
    s = Served(people_db, tmp_path, server={"max_concurrent_queries": 1, "query_wait": 0})
    try:
        a = s.connect("alice")
        victim = pid_worker(a.info.backend_pid)
        run = Running(a, FOREVER)                 # alice's only slot, held on the victim's process
        b = s.connect("alice")
        assert pid_worker(b.info.backend_pid) != victim

        def refused() -> bool:
            try:
                b.execute("SELECT 1").fetchall()
            except psycopg.Error as err:
                assert err.sqlstate == "53400", err
                return True
            return False

        runs = [run]
        assert _wait(lambda: _holding(runs, [a], refused))
        run = runs[0]
        before = set(s.workers())
        assert len(before) == 2
        pid = _process_of(s, victim)
        assert pid in before
        os.kill(pid, signal.SIGKILL)
        value, error = run.result()               # the client loses its connection
        assert value is None and isinstance(error, psycopg.OperationalError)
        assert s.log_has(f"worker {victim} exited with code -9; starting it again")
        assert _wait(lambda: _process_of(s, victim) != pid)         # its successor is ready
        assert _process_of(s, victim) in s.workers()
        assert b.execute("SELECT COUNT(*) FROM people WHERE age > 5").fetchone()[0] > 0   # the slot is back
        fresh = [s.connect("alice") for _ in range(2)]                # both processes serve again
        assert {pid_worker(c.info.backend_pid) for c in fresh} == {0, 1}
        for i, c in enumerate(fresh):
            assert c.execute(f"SELECT COUNT(*) FROM people WHERE age > {20 + i}").fetchone()[0] > 0
            c.close()
        b.close()
        a.close()
        runtime = [Path(m.group(1)) for line in s.lines if (m := re.search(r"runtime directory (\S+)\)", line))]
        assert len(runtime) == 1 and runtime[0].is_dir()
        assert s.stop() == 0
        assert "Traceback" not in "".join(s.lines)
        assert not runtime[0].exists()                                  # its runtime directory is removed
    finally:
        s.stop()


def _process_of(s: Served, index: int) -> int:
    """The OS pid of worker `index` now (its latest "worker I ready (process P)" line)."""
    found = [int(m.group(1)) for line in list(s.lines)
             if (m := re.search(rf"worker {index} ready \(process (\d+)\)", line))]
    assert found, "".join(s.lines)
    return found[-1]


def test_workers_stop_when_the_supervisor_dies(people_db, tmp_path):
    s = Served(people_db, tmp_path)
    workers = s.workers()
    assert len(workers) == 2
    runtime = [Path(m.group(1)) for line in s.lines if (m := re.search(r"runtime directory (\S+)\)", line))]
    assert len(runtime) == 1 and runtime[0].is_dir()
    s.proc.kill()                                  # kill -9: no chance to stop its workers
    s.proc.wait()

    def gone(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return True
        return stat[0] == "Z"

    assert _wait(lambda: all(gone(p) for p in workers))
    assert _wait(lambda: not runtime[0].exists())          # the workers removed what it left


def test_workers_refuse_spark():
    from click.testing import CliRunner

    from dpsql.frontends.cli import cli
    r = CliRunner().invoke(cli, ["serve", "--backend", "spark://localhost:7077", "--policy", "p.toml",
                                 "--workers", "2"])
    assert r.exit_code == 2 and "Spark" in r.output


def test_tls_through_a_worker(people_db, tmp_path):
    """A handed-over connection negotiates TLS in its worker as an accepted one does."""
    from tests.proxy.test_robustness import _self_signed
    cert, key = _self_signed(tmp_path)
    s = Served(people_db, tmp_path, server={"tls_cert": str(cert), "tls_key": str(key)})
    try:
        assert any("auth trust, tls, 2 processes" in line for line in s.lines)
        seen = set()
        for i in range(2):
            with psycopg.connect(f"host=127.0.0.1 port={s.port} user=alice dbname=test sslmode=require",
                                 autocommit=True) as c:
                assert c.pgconn.ssl_in_use
                assert c.execute(f"SELECT COUNT(*) FROM people WHERE age > {i}").fetchone()[0] > 0
                seen.add(pid_worker(c.info.backend_pid))
        assert seen == {0, 1}
        assert s.stop() == 0
    finally:
        s.stop()


def test_connection_limits_hold_over_workers(people_db, tmp_path):
    """max_connections_per_analyst and max_connections count sessions on every process."""
    s = Served(people_db, tmp_path, server={"max_connections": 3, "max_connections_per_analyst": 2})
    conns = []
    try:
        conns += [s.connect("alice"), s.connect("alice")]
        assert {pid_worker(c.info.backend_pid) for c in conns} == {0, 1}
        for _ in range(2):                                  # whichever process the attempt lands on
            with pytest.raises(psycopg.OperationalError) as err:
                s.connect("alice")
            assert "max_connections_per_analyst" in str(err.value)
        conns.append(s.connect("bob"))
        for _ in range(2):
            with pytest.raises(psycopg.OperationalError) as err:
                s.connect("carol")
            assert "[server] max_connections)" in str(err.value)
        conns.pop(0).close()
        assert _wait(lambda: _admitted(s, "carol"))
    finally:
        for c in conns:
            c.close()
        s.stop()


def _admitted(s: Served, user: str) -> bool:
    try:
        s.connect(user).close()
    except psycopg.OperationalError:
        return False
    return True
