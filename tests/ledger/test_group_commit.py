"""Group commit in the ledger, on real SQLite files: concurrent charges share one transaction and
one COMMIT, each is checked against the running totals in order, one failing charge refuses only
itself, and no charge returns (so no answer is released) before the COMMIT holding it has returned.

The only instrumentation is ``Group.on_commit``, called just before and just after the batch's
COMMIT; SQLite itself is never replaced."""
from __future__ import annotations

import sqlite3
import textwrap
import threading
import time
from fractions import Fraction

import pytest

from dpsql.errors import BudgetExhausted, OperationalError, QueryRejected
from dpsql.ledger import Ledger, SubsetCharge
from dpsql.ledger.group_commit import Group
from tests.ledger.test_ledger import LAPLACE, _python, _race

BUDGET = {"epsilon_total": 1.0, "delta_total": 1e-6}


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


class Commits:
    """Records every batch's COMMIT; can hold the first one until `hold` charges queue behind it."""

    def __init__(self, ledger: Ledger, hold: int = 0):
        self.ledger, self.hold = ledger, hold
        self.lock = threading.Lock()
        self.batches: list[tuple[int, ...]] = []
        self.durable: set[int] = set()
        self.committing = 0

    def __call__(self, phase: str, ids: tuple[int, ...]) -> None:
        if phase == "commit":
            if self.hold and not self.batches:
                deadline = time.monotonic() + 30
                while len(self.ledger._group.queue) < self.hold and time.monotonic() < deadline:
                    time.sleep(0.001)
            with self.lock:
                self.committing += 1
            return
        with self.lock:
            self.committing -= 1
            self.batches.append(ids)
            self.durable.update(ids)


def held_batch(ledger: Ledger, monkeypatch, calls: list, hook=None) -> tuple[list, Commits]:
    """Run `calls` from one thread each, all in one batch: a plug charge's batch holds its COMMIT
    until every call has queued behind it. Returns each call's outcome (row id or exception)."""
    commits = Commits(ledger, hold=len(calls))
    monkeypatch.setattr(Group, "on_commit", hook(commits) if hook else commits)
    plug = threading.Thread(target=lambda: ledger.charge("plug", 0.01, 0.0, **BUDGET, **LAPLACE))
    plug.start()
    while ledger._group.queue or not ledger._group.leading:     # until the plug's batch is led
        time.sleep(0.001)
    out = run_threads(len(calls), lambda i: calls[i]())
    plug.join(30)
    return out, commits


def run_threads(n: int, fn) -> list:
    out: list = [None] * n
    start = threading.Barrier(n)

    def go(i: int) -> None:
        start.wait()
        try:
            out[i] = fn(i)
        except Exception as err:       # noqa: BLE001 -- the outcome is what the test checks
            out[i] = err

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_concurrent_charges_share_one_commit(ledger, monkeypatch):
    calls = [lambda i=i: ledger.charge(f"a{i % 4}", 0.01, 0.0, **BUDGET, **LAPLACE) for i in range(31)]
    ids, commits = held_batch(ledger, monkeypatch, calls)
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 31
    assert [len(b) for b in commits.batches] == [1, 31]         # the plug's, then one for all 31
    assert sorted(commits.batches[1]) == sorted(ids)
    assert len(ledger.charges()) == 32


def test_no_charge_returns_before_its_commit(tmp_path, monkeypatch):
    """Durability before release, from many threads: when charge() returns, the COMMIT holding its
    row has returned (the post-COMMIT hook has seen the id) and another connection reads the row."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    commits = Commits(ledger)

    def hook(phase: str, ids: tuple[int, ...]) -> None:
        if phase == "commit":
            time.sleep(0.002)           # widen the window in which a premature release would show
        commits(phase, ids)

    monkeypatch.setattr(Group, "on_commit", hook)
    violations: list[str] = []

    def spend(i: int) -> int:
        reader = sqlite3.connect(path)
        n = 0
        for _ in range(15):
            row_id = ledger.charge(f"a{i % 3}", 0.001, 0.0, epsilon_total=100.0, delta_total=0.0, **LAPLACE)
            with commits.lock:
                if row_id not in commits.durable:
                    violations.append(f"charge {row_id} returned before its COMMIT returned")
            if reader.execute("SELECT COUNT(*) FROM charges WHERE id = ?", (row_id,)).fetchone()[0] != 1:
                violations.append(f"charge {row_id} returned but another connection cannot read it")
            n += 1
        reader.close()
        return n

    try:
        counts = run_threads(24, spend)
    finally:
        ledger.close()
    assert counts == [15] * 24 and violations == []
    assert sum(len(b) for b in commits.batches) == 24 * 15
    assert len(commits.batches) < 24 * 15       # batches did form: fewer commits than charges


def test_a_batch_checks_each_charge_against_the_running_total(ledger, monkeypatch):
    # 40 charges of 0.1 against 1.0 in one batch, ann's and bob's alternating: exactly 10 each fit
    calls = [lambda i=i: ledger.charge("ann" if i % 2 else "bob", 0.1, 0.0, **BUDGET, **LAPLACE)
             for i in range(40)]
    out, commits = held_batch(ledger, monkeypatch, calls)
    assert [len(b) for b in commits.batches] == [1, 20]
    for who, parity in (("ann", 1), ("bob", 0)):
        mine = [out[i] for i in range(40) if i % 2 == parity]
        assert sum(isinstance(r, int) for r in mine) == 10
        assert sum(isinstance(r, BudgetExhausted) for r in mine) == 10
        s = ledger.spending(who, **BUDGET)
        assert (s.epsilon_spent, s.epsilon_remaining) == (1.0, 0.0)
        assert len(ledger.charges(who)) == 10


def test_zcdp_charges_in_one_batch_never_overspend(ledger, monkeypatch):
    from dpsql.ledger import accounting
    rho = Fraction(1, 200)
    calls = [lambda: ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE, rho=rho, zcdp_delta=0.0,
                                   accountant="zcdp") for _ in range(60)]
    out, commits = held_batch(ledger, monkeypatch, calls)
    kept = [r for r in out if isinstance(r, int)]
    assert all(isinstance(r, (int, BudgetExhausted)) for r in out)
    assert sorted(commits.batches[1]) == sorted(kept)
    t = ledger.totals("ann")
    assert t.accountant == "zcdp" and Fraction(t.rho) == rho * len(kept)
    eps, dlt = BUDGET["epsilon_total"], BUDGET["delta_total"]
    assert accounting.fits(t.rho, t.zcdp_delta, eps, dlt)
    assert not accounting.fits(t.rho + accounting.decimal_up(rho), t.zcdp_delta, eps, dlt)
    assert 0 < len(kept) < 60


def test_one_failing_charge_refuses_only_itself(tmp_path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.charge("ann", 0.9, 0.0, **BUDGET, **LAPLACE)
    ledger.charge("mallory", 0.1, 0.0, **BUDGET, **LAPLACE)
    raw = sqlite3.connect(path)
    raw.execute("UPDATE spent SET epsilon = 'garbage' WHERE analyst = 'mallory'")   # a damaged row
    raw.commit()
    raw.close()

    def bad_cap(n):
        raise ValueError("a subset cap must be a whole number >= 0")

    capped = SubsetCharge("people", frozenset({"1"}), 0)        # cap 0: refused by the series
    broken = SubsetCharge("people", frozenset({"2"}), bad_cap)   # the caller's bug
    calls = [
        lambda: ledger.charge("bob", 0.2, 0.0, **BUDGET, **LAPLACE),
        lambda: ledger.charge("ann", 0.2, 0.0, **BUDGET, **LAPLACE),           # does not fit
        lambda: ledger.charge("carol", 0.2, 0.0, **BUDGET, **LAPLACE, subset=capped),
        lambda: ledger.charge("dave", 0.2, 0.0, **BUDGET, **LAPLACE, subset=broken),
        lambda: ledger.charge("mallory", 0.1, 0.0, **BUDGET, **LAPLACE),       # damaged ledger row
        lambda: ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE),           # fits: 0.9 + 0.1
        lambda: ledger.charge("erin", 0.2, 0.0, **BUDGET, **LAPLACE, subset=SubsetCharge("people", frozenset({"3"}), 5)),
    ]
    out, commits = held_batch(ledger, monkeypatch, calls)
    try:
        assert len(commits.batches) == 2 and len(commits.batches[1]) == 3   # bob, ann's 0.1, erin
        assert isinstance(out[0], int) and isinstance(out[5], int) and isinstance(out[6], int)
        assert isinstance(out[1], BudgetExhausted)
        assert isinstance(out[2], QueryRejected)
        assert isinstance(out[3], ValueError)
        assert isinstance(out[4], OperationalError) and "malformed amount" in str(out[4])
        assert sorted(commits.batches[1]) == sorted([out[0], out[5], out[6]])
        assert ledger.spending("ann", **BUDGET).epsilon_spent == 1.0
        rows = ledger.charges()
        assert [r["analyst"] for r in rows[:3]] == ["ann", "mallory", "plug"]
        assert sorted(r["analyst"] for r in rows[3:]) == ["ann", "bob", "erin"]
        assert ledger.analysts() == ["ann", "bob", "erin", "mallory", "plug"]
        states = {s.population: s.answered for s in ledger.subset_series("erin")}
        assert states == {"people": 1} and ledger.subset_series("carol") == [] \
            and ledger.subset_series("dave") == []
    finally:
        ledger.close()


def test_a_failed_commit_refuses_the_whole_batch_and_records_nothing(ledger, monkeypatch):
    ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE)

    def failing(commits: Commits):
        def hook(phase: str, ids: tuple[int, ...]) -> None:
            commits(phase, ids)
            if phase == "commit" and len(ids) == 7:
                raise sqlite3.OperationalError("disk I/O error")     # as SQLite reports a failed write
        return hook

    calls = [lambda: ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE)] * 7
    out, commits = held_batch(ledger, monkeypatch, calls, hook=failing)
    assert commits.batches == [commits.batches[0]] and len(commits.batches[0]) == 1   # only the plug's
    assert all(isinstance(r, OperationalError) and "disk I/O error" in str(r) for r in out), out
    assert [r["analyst"] for r in ledger.charges()] == ["ann", "plug"]
    assert ledger.spending("ann", **BUDGET).epsilon_spent == 0.1
    assert isinstance(ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE), int)    # the ledger goes on


def test_ledgers_of_one_file_share_a_group_and_its_durable_connection(tmp_path):
    a, b = Ledger(tmp_path / "l.sqlite"), Ledger(str(tmp_path / "." / "l.sqlite"))
    other = Ledger(tmp_path / "other.sqlite")
    try:
        assert a._group is b._group and a._group is not other._group
        conn = a._group.conn
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2          # FULL
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        a.close()
        assert b._group.conn is conn                  # still open for b
        b.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE)
    finally:
        a.close()
        b.close()
        other.close()
    assert Group._registry.get((__import__("os").getpid(), str((tmp_path / "l.sqlite").resolve()))) is None
    with Ledger(tmp_path / "l.sqlite") as c:          # a fresh group after the last one closed
        assert c.spending("ann", **BUDGET).epsilon_spent == 0.1
        c.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE)


_THREADED_SPENDER = textwrap.dedent("""
    import json, sys, threading
    from dpsql.errors import BudgetExhausted
    from dpsql.ledger import Ledger
    path, tries, eps, total = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    led = Ledger(path)
    print("ready", flush=True)
    sys.stdin.readline()
    ids, refused, lock = [], [], threading.Lock()

    def spend():
        for _ in range(tries):
            try:
                row = led.charge("ann", eps, 0.0, epsilon_total=total, delta_total=0.0,
                                 mechanism="laplace", params={"scale": 100.0})
                with lock:
                    ids.append(row)
            except BudgetExhausted:
                with lock:
                    refused.append(1)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"ids": ids, "refused": len(refused)}), flush=True)
""")


def test_threaded_processes_never_overspend(tmp_path):
    """Two processes, eight charging threads each (so batches in each), on one ledger file."""
    import subprocess
    path = tmp_path / "ledger.sqlite"
    procs = [_python(_THREADED_SPENDER, str(path), "25", "0.01", "2.5", stdin=subprocess.PIPE) for _ in range(2)]
    reports = _race(procs, timeout=120)
    ids = [i for r in reports for i in r["ids"]]
    assert len(ids) == 250 and len(set(ids)) == 250            # 2 x 8 x 25 = 400 tries, 250 fit
    assert sum(r["refused"] for r in reports) == 150
    with Ledger(path) as led:
        assert sorted(r["id"] for r in led.charges()) == sorted(ids)
        s = led.spending("ann", epsilon_total=2.5, delta_total=0.0)
        assert (s.epsilon_spent, s.epsilon_remaining) == (2.5, 0.0)


def test_no_answer_is_released_before_its_charge_is_committed(people_db, tmp_path, monkeypatch):
    """End to end: sessions of one Backend (as the proxy's clients) answer queries from many threads;
    when an answer is returned, another connection already reads every charge of that analyst.
    Each batch is held 3 ms before its COMMIT, so an answer released when its charge is merely
    queued or applied would show. (Waking waiters between the hook and COMMIT is caught by
    test_no_charge_returns_before_its_commit, which checks right at charge()'s return.)"""
    from dpsql.backend import Backend
    from tests.conftest import policy_for

    pol = policy_for(tmp_path)
    path = pol["budget"]["ledger"]

    def hook(phase: str, ids: tuple[int, ...]) -> None:
        if phase == "commit":
            time.sleep(0.003)

    monkeypatch.setattr(Group, "on_commit", hook)
    violations: list[str] = []
    with Backend(people_db, pol) as backend:
        def ask(i: int) -> int:
            who = f"analyst{i}"
            session = backend.session(who)
            reader = sqlite3.connect(path)
            try:
                for n in range(1, 6):
                    session.execute(f"SELECT COUNT(*) FROM people WHERE age > {n}")
                    seen = reader.execute("SELECT COUNT(*) FROM charges WHERE analyst = ?", (who,)).fetchone()[0]
                    if seen < n:
                        violations.append(f"{who}: answer {n} released with {seen} charges committed")
            finally:
                reader.close()
                session.close()
            return n

        out = run_threads(12, ask)
    assert out == [5] * 12 and violations == []


def test_an_interrupted_waiter_withdraws_its_charge_and_the_queue_goes_on(ledger, monkeypatch):
    """KeyboardInterrupt while the main thread waits behind another batch: its charge, still queued,
    is withdrawn (never recorded, never released); charges queued after it are still committed."""
    import signal

    main = threading.main_thread().ident
    assert threading.get_ident() == main
    gate = threading.Event()

    def hook(phase: str, ids: tuple[int, ...]) -> None:
        if phase == "commit" and ids and not gate.is_set():
            gate.wait(30)                      # the plug's batch waits until the test lets it go

    monkeypatch.setattr(Group, "on_commit", hook)
    group = ledger._group
    plug = threading.Thread(target=lambda: ledger.charge("plug", 0.01, 0.0, **BUDGET, **LAPLACE))
    plug.start()
    while group.queue or not group.leading:
        time.sleep(0.001)
    later: list = []

    def interrupt() -> None:
        while len(group.queue) < 1:            # the main thread's charge is queued
            time.sleep(0.001)
        t = threading.Thread(target=lambda: later.append(ledger.charge("bob", 0.1, 0.0, **BUDGET, **LAPLACE)))
        t.start()
        while len(group.queue) < 2:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)    # Ctrl-C, delivered to the waiting main thread
        time.sleep(0.05)
        gate.set()
        t.join(30)

    helper = threading.Thread(target=interrupt)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE)
    helper.join(30)
    plug.join(30)
    assert len(later) == 1 and isinstance(later[0], int)
    assert sorted(r["analyst"] for r in ledger.charges()) == ["bob", "plug"]
    assert not group.leading and not group.queue
    assert isinstance(ledger.charge("ann", 0.1, 0.0, **BUDGET, **LAPLACE), int)


_KILLED_MID_BATCH = textwrap.dedent("""
    import os, sys, threading
    from dpsql.ledger import Ledger
    led = Ledger(sys.argv[1])
    out = threading.Lock()

    def spend(i):
        while True:
            row = led.charge(f"a{i % 3}", 0.001, 1e-9, epsilon_total=1e9, delta_total=1.0,
                             mechanism="laplace", params={"scale": 1000.0})
            with out:                       # "released": reported only after charge() returned
                os.write(1, f"{row}\\n".encode())

    for i in range(8):
        threading.Thread(target=spend, args=(i,), daemon=True).start()
    threading.Event().wait()
""")


def test_killed_mid_batch_every_released_charge_is_recorded(tmp_path):
    """kill -9 a process whose eight threads charge in batches, at an arbitrary moment: every charge
    it reported (i.e. whose charge() had returned) is in the ledger, and the running totals equal
    the sum of the charge rows (a batch cut short left nothing half-written)."""
    import signal
    from decimal import Decimal
    path = tmp_path / "ledger.sqlite"
    Ledger(path).close()
    proc = _python(_KILLED_MID_BATCH, str(path))
    reported: list[int] = []
    try:
        while len(reported) < 300:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            reported.append(int(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    reported += [int(x) for x in out.split()]          # lines written before the kill landed
    assert proc.returncode == -signal.SIGKILL
    with Ledger(path) as led:
        rows = led.charges()
        assert set(reported) <= {r["id"] for r in rows}
        for who in led.analysts():
            mine = [r for r in rows if r["analyst"] == who]
            t = led.totals(who)
            assert t.epsilon == sum(Decimal("0.001") for _ in mine)
            assert t.delta == sum(Decimal("1E-9") for _ in mine)
        raw = sqlite3.connect(path)
        assert raw.execute("SELECT SUM(charges) FROM spent").fetchone()[0] == len(rows)
        raw.close()


def test_the_gathering_window_is_bounded(ledger, monkeypatch):
    """With GROUP_WINDOW_S > 0 a leader whose last batch had several charges waits for as many
    again, but never longer than the window; a lone charger after a lone batch does not wait."""
    calls = [lambda: ledger.charge("ann", 0.01, 0.0, **BUDGET, **LAPLACE)] * 5
    held_batch(ledger, monkeypatch, calls)                  # the last batch held 5 charges
    monkeypatch.setattr(Group, "on_commit", None)
    monkeypatch.setattr(Group, "window", 1.0)
    t0 = time.monotonic()
    ledger.charge("ann", 0.01, 0.0, **BUDGET, **LAPLACE)    # waits for 4 more that never come
    waited = time.monotonic() - t0
    assert 1.0 <= waited < 10
    assert ledger._group.last_batch == 1
    t0 = time.monotonic()
    ledger.charge("ann", 0.01, 0.0, **BUDGET, **LAPLACE)    # after a lone batch: no wait
    assert time.monotonic() - t0 < 1.0
    assert len(ledger.charges("ann")) == 7
