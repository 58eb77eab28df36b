"""The privacy-budget ledger on real SQLite files: exact accounting, refusal, persistence,
and no overspending or lost charges across threads and processes."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from decimal import Decimal
from pathlib import Path

import pytest

from dpsql.errors import BudgetExhausted, OperationalError
from dpsql.ledger import SCHEMA_VERSION, Ledger, Spending

ROOT = Path(__file__).resolve().parents[2]
BUDGET = {"epsilon_total": 3.0, "delta_total": 1e-6}
LAPLACE = {"mechanism": "laplace", "params": {"scale": 2.0, "l1_sensitivity": 1.0}}


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def charge(led: Ledger, analyst: str = "ann", epsilon: float = 0.5, delta: float = 0.0, **kw) -> int:
    return led.charge(analyst, epsilon, delta, **(BUDGET | LAPLACE | kw))


def spent(led: Ledger, analyst: str = "ann") -> Spending:
    return led.spending(analyst, **BUDGET)


# -- accounting -------------------------------------------------------------------------------------

def test_charge_and_spending(ledger):
    assert spent(ledger) == Spending("ann", 0.0, 3.0, 0.0, 1e-6, 3.0, 1e-6)
    first = charge(ledger, epsilon=0.1)
    second = charge(ledger, epsilon=0.2, delta=1e-7)
    assert second > first
    # 0.1 + 0.2 is exactly 0.3; rho is recorded under basic too (generic: epsilon^2 / 2 each)
    assert spent(ledger) == Spending("ann", 0.3, 2.7, 1e-7, 9e-7, 3.0, 1e-6, "basic", 0.025)
    assert spent(ledger, "bob").epsilon_spent == 0.0


@pytest.mark.parametrize("accountant", ["basic", "zcdp"])
def test_charge_with_spending_is_what_a_read_after_it_gives(tmp_path, accountant):
    """The spending a charge returns (from its own transaction) equals the ledger read right after
    it, under both accountants, one charger or many at once (batched: each sees the charges
    before it in the batch, its own included, and none after)."""
    with Ledger(tmp_path / "ledger.sqlite") as led:
        for eps in (0.1, 0.2, 0.05):
            _, got = led.charge_with_spending("ann", eps, 1e-8, accountant=accountant, **(BUDGET | LAPLACE))
            assert got == led.spending("ann", accountant=accountant, **BUDGET)
        results: list = []
        barrier = threading.Barrier(8)

        def one(i: int) -> None:
            with Ledger(tmp_path / "ledger.sqlite") as own:
                barrier.wait()
                results.append(own.charge_with_spending("ann", 0.01 * (i + 1), 0.0, accountant=accountant,
                                                        **(BUDGET | LAPLACE)))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        final = led.spending("ann", accountant=accountant, **BUDGET)
        assert len(results) == 8
        last = max(results, key=lambda r: r[0])[1]          # the latest charge's view is the final one
        assert last == final
        ordered = [sp.rho_spent for _, sp in sorted(results, key=lambda r: r[0])]
        assert ordered == sorted(ordered) and len(set(ordered)) == 8    # each saw exactly those before it


def test_six_halves_fit_three_and_the_seventh_is_refused(ledger):
    ids = [charge(ledger, epsilon=0.5) for _ in range(6)]
    assert len(set(ids)) == 6
    with pytest.raises(BudgetExhausted) as info:
        charge(ledger, epsilon=0.5, query="SELECT COUNT(*) FROM secret_table")
    message = str(info.value)
    assert "epsilon" in message and "remaining 0" in message and "needs 0.5" in message
    assert "secret_table" not in message and info.value.sqlstate == "53000"
    assert isinstance(info.value, OperationalError)
    assert len(ledger.charges()) == 6
    assert spent(ledger).epsilon_spent == 3.0 and spent(ledger).epsilon_remaining == 0.0


def test_tenths_and_float_dust_never_overspend(ledger):
    for _ in range(30):
        charge(ledger, epsilon=0.1)        # float sum of thirty 0.1s is 2.9999999999999996
    with pytest.raises(BudgetExhausted):
        charge(ledger, epsilon=5e-324)     # the smallest double still does not fit
    assert spent(ledger).epsilon_spent == 3.0
    ledger.charge("bob", 2.7, 0.0, **BUDGET, **LAPLACE)
    with pytest.raises(BudgetExhausted) as info:
        ledger.charge("bob", 0.1 + 0.2, 0.0, **BUDGET, **LAPLACE)   # 0.30000000000000004
    assert "remaining 0.3" in str(info.value) and "needs 0.30000000000000004" in str(info.value)
    ledger.charge("bob", 0.3, 0.0, **BUDGET, **LAPLACE)
    assert spent(ledger, "bob").epsilon_remaining == 0.0


def test_delta_accounting(ledger):
    for _ in range(10):
        charge(ledger, epsilon=0.0, delta=1e-7)
    with pytest.raises(BudgetExhausted) as info:
        charge(ledger, epsilon=0.01, delta=1e-7)
    assert "delta remaining 0," in str(info.value) and "needs 0.0000001" in str(info.value)
    s = spent(ledger)
    assert (s.epsilon_spent, s.delta_spent, s.delta_remaining) == (0.0, 1e-6, 0.0)
    charge(ledger, epsilon=0.01)   # pure epsilon still fits


def test_refusal_records_nothing(ledger):
    charge(ledger, epsilon=2.5)
    before = (ledger.charges(), spent(ledger))
    for eps, delta in [(0.6, 0.0), (0.1, 2e-6), (10.0, 1.0)]:
        with pytest.raises(BudgetExhausted):
            charge(ledger, epsilon=eps, delta=delta)
    assert (ledger.charges(), spent(ledger)) == before
    with pytest.raises(BudgetExhausted):
        charge(ledger, "carol", epsilon=3.5)
    assert ledger.analysts() == ["ann"]


def test_totals_come_from_the_caller_each_time(ledger):
    charge(ledger, epsilon=2.0)
    with pytest.raises(BudgetExhausted):
        charge(ledger, epsilon=0.5, epsilon_total=2.0)                   # policy tightened
    assert ledger.spending("ann", epsilon_total=1.0, delta_total=0.0).epsilon_remaining == 0.0
    charge(ledger, epsilon=5.0, epsilon_total=10.0)                      # policy loosened
    charge(ledger, epsilon=1e9, epsilon_total=float("inf"))              # unlimited
    assert spent(ledger).epsilon_spent == 1e9 + 7


def test_persistence_across_instances(tmp_path):
    path = tmp_path / "deep" / "er" / "ledger.sqlite"   # parent directories are created
    with Ledger(path) as led:
        charge(led, epsilon=1.25, delta=1e-7, query="  SELECT COUNT(*) FROM t\n")
    with Ledger(str(path)) as led:
        assert spent(led).epsilon_spent == 1.25 and spent(led).delta_spent == 1e-7
        [row] = led.charges()
        assert row["query"] == "SELECT COUNT(*) FROM t" and row["epsilon"] == 1.25
        charge(led, epsilon=1.75)
        with pytest.raises(BudgetExhausted):
            charge(led, epsilon=0.01)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert raw.execute("SELECT epsilon, delta, charges FROM spent").fetchall() == [("3.00", "1E-7", 2)]
    assert raw.execute("SELECT epsilon FROM charges ORDER BY id").fetchall() == [("1.25",), ("1.75",)]
    raw.close()


def test_params_round_trip_and_charge_rows(ledger):
    params = {"scale": 0.1, "sensitivity": {"l1": 3, "l2": 1.7320508075688772}, "grid_k": -40,
              "columns": ["age", "income"], "bounded": True, "salt": None}
    first = ledger.charge("ann", 0.25, 1e-9, **BUDGET, mechanism="gaussian", params=params,
                          query="SELECT AVG(age) FROM people")
    second = charge(ledger, "bob")
    rows = ledger.charges()
    assert [r["id"] for r in rows] == [first, second]
    row = rows[0]
    assert row["params"] == params and row["mechanism"] == "gaussian"
    assert (row["analyst"], row["epsilon"], row["delta"]) == ("ann", 0.25, 1e-9)
    assert row["query"] == "SELECT AVG(age) FROM people"
    assert row["at"].endswith("+00:00")
    assert [r["id"] for r in ledger.charges("bob")] == [second]
    assert ledger.charges("nobody") == []
    assert rows[1]["query"] is None
    json.dumps(rows)   # admin tooling can print them


def test_charge_params_record_what_they_were_made_from(ledger):
    """ChargeParams (a plan's parameters, encoded once): the ledger records the same row as for the
    dict, and changing the dict afterwards changes neither the record nor the mapping."""
    from dpsql.ledger import ChargeParams
    params = {"values": [{"scale": 0.5, "measure": "count"}], "bounding": {"l0": 1, "bounded": True}}
    frozen = ChargeParams("laplace", params)
    params["values"][0]["scale"] = 99.0
    params["extra"] = 1
    first = ledger.charge("ann", 0.25, 0.0, **BUDGET, mechanism="laplace", params=frozen)
    second = ledger.charge("ann", 0.25, 0.0, **BUDGET, mechanism="laplace", params=frozen)
    plain = ledger.charge("ann", 0.25, 0.0, **BUDGET, mechanism="laplace",
                          params={"values": [{"scale": 0.5, "measure": "count"}], "bounding": {"l0": 1, "bounded": True}})
    rows = {r["id"]: r["params"] for r in ledger.charges("ann")}
    assert rows[first] == rows[second] == rows[plain] == {"values": [{"scale": 0.5, "measure": "count"}],
                                                          "bounding": {"l0": 1, "bounded": True}}
    assert dict(frozen) == rows[plain] and len(frozen) == 2 and frozen["bounding"]["l0"] == 1
    with pytest.raises(ValueError):
        ChargeParams("laplace", {"scale": float("nan")})


def test_numpy_values_are_accepted():
    import numpy as np

    from dpsql.ledger.params import amount, encode_params
    assert amount("epsilon", np.float64(0.1)) == Decimal("0.1")
    assert json.loads(encode_params("m", {"k": np.int64(-40), "s": np.float64(0.5)})) == {"k": -40, "s": 0.5}


def test_analysts_sorted(ledger):
    for who in ["zed", "Ann", "bob", "zed", "ann"]:
        charge(ledger, who, epsilon=0.1)
    assert ledger.analysts() == ["Ann", "ann", "bob", "zed"]


@pytest.mark.parametrize("epsilon, delta", [
    (-0.1, 0.0), (0.0, 0.0), (float("nan"), 0.0), (float("inf"), 0.0), (0.1, float("nan")),
    (0.1, -1e-9), (0.1, float("inf")), ("0.1", 0.0), (True, 0.0), (None, 0.0),
])
def test_bad_amounts(ledger, epsilon, delta):
    with pytest.raises(ValueError):
        ledger.charge("ann", epsilon, delta, **BUDGET, **LAPLACE)
    assert ledger.charges() == []


@pytest.mark.parametrize("change", [
    {"analyst": ""}, {"analyst": None}, {"mechanism": ""}, {"params": [("scale", 1.0)]},
    {"params": {"scale": float("nan")}}, {"params": {"f": object()}}, {"epsilon_total": -1.0},
    {"delta_total": float("nan")}, {"query": b"SELECT 1"},
])
def test_bad_arguments(ledger, change):
    args = {"analyst": "ann", "epsilon": 0.1, "delta": 0.0} | BUDGET | LAPLACE | change
    with pytest.raises(ValueError):
        ledger.charge(**args)
    assert ledger.charges() == []


def test_memory_ledger_refused():
    for path in (":memory:", Path(":memory:"), ""):
        with pytest.raises(ValueError):
            Ledger(path)


def test_sqlite_problems_become_operational_errors(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not an SQLite database, just some text" * 100)
    with pytest.raises(OperationalError) as info:
        Ledger(junk)
    assert str(junk) in str(info.value) and "not a database" in str(info.value)

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OperationalError) as info:
        Ledger(blocker / "ledger.sqlite")     # its "directory" is a file
    assert str(blocker) in str(info.value)

    with pytest.raises(OperationalError) as info:
        Ledger(tmp_path)                      # a directory, not a file
    assert str(tmp_path) in str(info.value)

    newer = tmp_path / "newer.sqlite"
    raw = sqlite3.connect(newer)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(OperationalError, match="newer"):
        Ledger(newer)


def test_closed_ledger(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.close()
    led.close()
    with pytest.raises(OperationalError, match="closed"):
        charge(led)
    with pytest.raises(OperationalError, match="closed"):
        led.analysts()


def test_durable_settings(ledger):
    db = ledger._conn
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2          # FULL
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- concurrency ------------------------------------------------------------------------------------

def test_threads_never_overspend(ledger):
    results: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(8)

    def spend() -> None:
        start.wait()
        for _ in range(50):
            try:
                ledger.charge("ann", 0.01, 0.0, epsilon_total=1.0, delta_total=0.0, **LAPLACE)
                results.append(1)
            except BudgetExhausted:
                refused.append(1)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(results), len(refused)) == (100, 300)
    s = ledger.spending("ann", epsilon_total=1.0, delta_total=0.0)
    assert (s.epsilon_spent, s.epsilon_remaining) == (1.0, 0.0)
    assert len(ledger.charges("ann")) == 100


def test_threads_with_their_own_ledgers(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    counts: list[int] = []
    start = threading.Barrier(4)

    def spend() -> None:
        with Ledger(path) as led:
            start.wait()
            n = 0
            for _ in range(30):
                try:
                    led.charge("ann", 0.05, 0.0, epsilon_total=2.0, delta_total=0.0, **LAPLACE)
                    n += 1
                except BudgetExhausted:
                    pass
            counts.append(n)

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 40


_SPENDER = textwrap.dedent("""
    import json, sys
    from dpsql.errors import BudgetExhausted
    from dpsql.ledger import Ledger
    path, tries, eps, total = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    led = Ledger(path)
    print("ready", flush=True)
    sys.stdin.readline()
    ids, refused = [], 0
    for _ in range(tries):
        try:
            ids.append(led.charge("ann", eps, 0.0, epsilon_total=total, delta_total=0.0,
                                  mechanism="laplace", params={"scale": 100.0}))
        except BudgetExhausted:
            refused += 1
    print(json.dumps({"ids": ids, "refused": refused}), flush=True)
""")


def _python(*args: str, **kw) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)

def _race(procs: list[subprocess.Popen], timeout: float = 60) -> list[dict]:
    """Wait until every process prints "ready", tell them all "go" at once (so their charges
    contend), and return each one's JSON report; a process that fails fails the test."""
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line == "ready\n", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * len(procs), [err for _, err in outs]
    return [json.loads(out) for out, _ in outs]


def test_processes_never_overspend(tmp_path):
    path = tmp_path / "ledger.sqlite"     # not created beforehand: both processes create it at once
    procs = [_python(_SPENDER, str(path), "100", "0.01", "1.5", stdin=subprocess.PIPE) for _ in range(2)]
    reports = _race(procs, timeout=60)
    ids = [i for r in reports for i in r["ids"]]
    assert len(ids) == 150 and len(set(ids)) == 150
    assert sum(r["refused"] for r in reports) == 50
    with Ledger(path) as led:
        assert sorted(r["id"] for r in led.charges()) == sorted(ids)
        s = led.spending("ann", epsilon_total=1.5, delta_total=0.0)
        assert (s.epsilon_spent, s.epsilon_remaining) == (1.5, 0.0)


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from dpsql.ledger import Ledger
    led = Ledger(sys.argv[1])
    row = led.charge("ann", 0.25, 1e-8, epsilon_total=1.0, delta_total=1e-6,
                     mechanism="laplace", params={"scale": 4.0}, query="SELECT COUNT(*) FROM t")
    print(row, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_killed_process_loses_no_charge(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        charge(led, epsilon=0.5)
    proc = _python(_KILLED, str(path))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    row_id = int(out)
    with Ledger(path) as led:
        rows = led.charges()
        assert [r["id"] for r in rows][-1] == row_id
        assert rows[-1]["params"] == {"scale": 4.0} and rows[-1]["query"] == "SELECT COUNT(*) FROM t"
        s = led.spending("ann", epsilon_total=1.0, delta_total=1e-6)
        assert (s.epsilon_spent, s.delta_spent) == (0.75, 1e-8)
