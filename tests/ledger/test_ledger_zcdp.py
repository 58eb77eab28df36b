"""The ledger under zCDP accounting: rho charged and checked against the (epsilon, delta) budget,
the accountant fixed at an analyst's first charge, the concurrency and crash guarantees of
test_ledger.py re-run against rho, and a version 2 ledger migrated in place."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import textwrap
import threading
from decimal import Decimal
from fractions import Fraction

import pytest

from dpsql.ledger import accounting
from dpsql.errors import BudgetExhausted
from dpsql.ledger import SCHEMA_VERSION, Ledger
from dpsql.noise import make_mechanism
from tests.ledger.test_ledger import _python, _race

BUDGET = {"epsilon_total": 1.0, "delta_total": 1e-6}
RHO = Fraction(1, 100)                     # the zCDP cost of each charge below
LAPLACE = {"mechanism": "laplace", "params": {"scale": 2.0}}


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def zcharge(led: Ledger, analyst: str = "ann", rho=RHO, part: float = 0.0, **kw) -> int:
    args = BUDGET | LAPLACE | {"rho": rho, "zcdp_delta": part, "accountant": "zcdp"} | kw
    return led.charge(analyst, 0.5, 0.0, **args)


def fitting(rho=RHO, part=0.0, epsilon_total=1.0, delta_total=1e-6) -> int:
    return accounting.zcdp_count(0, 0, accounting.decimal_up(Fraction(rho)), part, epsilon_total, delta_total)


def test_charges_fit_exactly_as_many_as_the_conversion_allows(ledger):
    n = fitting()
    assert 0 < n < 100
    for _ in range(n):
        zcharge(ledger)
    with pytest.raises(BudgetExhausted) as info:
        zcharge(ledger, query="SELECT SUM(secret) FROM t")
    msg = str(info.value)
    assert "rho remaining" in msg and "this query needs 0.01" in msg and "secret" not in msg
    s = ledger.spending("ann", **BUDGET, accountant="zcdp")
    assert s.accountant == "zcdp" and s.rho_spent == pytest.approx(n / 100)
    assert s.epsilon_spent <= 1.0 < float(accounting.epsilon_upper(Decimal(n + 1) / 100, Decimal("1E-6")))
    assert s.rho_remaining < 0.01 and s.rho_total == float(accounting.rho_capacity(1.0, Decimal("1E-6")))
    assert len(ledger.charges()) == n and ledger.charges()[0]["rho"] == 0.01


def test_zcdp_lets_many_small_charges_through_where_basic_would_not(ledger):
    """At (1, 1e-6): 200 charges of epsilon 0.01 under basic composition; under zCDP, charged as
    Laplace queries (rho = 0.01^2 / 2 each), more than twice as many."""
    n = 0
    while True:
        try:
            ledger.charge("zed", 0.01, 0.0, **BUDGET, **LAPLACE, rho=accounting.laplace_rho(0.01),
                          accountant="zcdp")
        except BudgetExhausted:
            break
        n += 1
    assert n == fitting(rho=accounting.laplace_rho(0.01)) > 2 * 100


def test_the_delta_part_is_charged_and_shrinks_what_rho_can_convert(ledger):
    zcharge(ledger, part=4e-7)
    zcharge(ledger, part=4e-7)
    with pytest.raises(BudgetExhausted) as info:
        zcharge(ledger, part=4e-7)
    assert "delta remaining 0.0000002" in str(info.value) and "partition selection" in str(info.value)
    s = ledger.spending("ann", **BUDGET)
    assert (s.delta_spent, s.delta_remaining) == (8e-7, pytest.approx(2e-7))
    # what is left of rho is converted at the 2e-7 left of delta, not at the budget's 1e-6
    assert s.rho_remaining == pytest.approx(float(accounting.rho_capacity(1.0, Decimal("2E-7"))) - 0.02)


def test_without_a_rho_a_charge_is_a_generic_epsilon_delta_release(ledger):
    ledger.charge("ann", 0.1, 1e-8, **BUDGET, **LAPLACE, accountant="zcdp")
    [row] = ledger.charges()
    assert row["rho"] == 0.005 and row["zcdp_delta"] == 1e-8


def test_the_accountant_is_fixed_at_the_first_charge(ledger):
    zcharge(ledger)                                    # ann starts under zCDP
    ledger.charge("bob", 0.5, 0.0, **BUDGET, **LAPLACE)   # bob under basic (the default of the API)
    # a later policy asking for the other accountant changes nothing for either
    ledger.charge("ann", 0.5, 0.0, **BUDGET, **LAPLACE, rho=RHO, accountant="basic")
    assert ledger.spending("ann", **BUDGET, accountant="basic").accountant == "zcdp"
    assert ledger.totals("ann").accountant == "zcdp"
    with pytest.raises(BudgetExhausted):               # bob's basic budget: 0.5 + 0.6 > 1
        ledger.charge("bob", 0.6, 0.0, **BUDGET, **LAPLACE, rho=Fraction(1, 10 ** 6), accountant="zcdp")
    assert ledger.spending("bob", **BUDGET, accountant="zcdp").accountant == "basic"
    assert ledger.spending("carol", **BUDGET, accountant="zcdp").accountant == "zcdp"   # nobody yet: the policy's


def test_rho_amounts_are_rounded_up_and_bad_ones_refused(ledger):
    third = Fraction(1, 3)
    zcharge(ledger, rho=third, epsilon_total=100.0)
    stored = Decimal(ledger._conn.execute("SELECT rho FROM charges").fetchone()[0])
    assert Fraction(stored) > third and stored == accounting.decimal_up(third)
    for bad in (-1.0, float("nan"), float("inf"), "0.1", True, Decimal(-1)):
        with pytest.raises(ValueError):
            zcharge(ledger, rho=bad)
    with pytest.raises(ValueError):
        zcharge(ledger, accountant="advanced")
    assert len(ledger.charges()) == 1


def test_schema_and_totals_on_disk(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        zcharge(led, rho=Fraction(1, 8), part=1e-8, epsilon_total=100.0)
        zcharge(led, rho=Fraction(1, 8), epsilon_total=100.0)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert raw.execute("SELECT epsilon, rho, zcdp_delta, accountant, charges FROM spent").fetchall() == [
        ("1.0", "0.250", "1E-8", "zcdp", 2)]
    raw.close()


# -- concurrency and crashes, against rho ------------------------------------------------------------

def test_threads_never_overspend_rho(ledger):
    n = fitting()
    results: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(8)

    def spend() -> None:
        start.wait()
        for _ in range(n):
            try:
                zcharge(ledger)
                results.append(1)
            except BudgetExhausted:
                refused.append(1)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(results), len(refused)) == (n, 7 * n)
    assert ledger.spending("ann", **BUDGET).rho_spent == pytest.approx(n / 100)
    assert len(ledger.charges("ann")) == n


def test_threads_with_their_own_ledgers_never_overspend_rho(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    n = fitting()
    counts: list[int] = []
    start = threading.Barrier(4)

    def spend() -> None:
        with Ledger(path) as led:
            start.wait()
            got = 0
            for _ in range(n):
                try:
                    zcharge(led)
                    got += 1
                except BudgetExhausted:
                    pass
            counts.append(got)

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == n


_SPENDER = textwrap.dedent("""
    import json, sys
    from fractions import Fraction
    from dpsql.errors import BudgetExhausted
    from dpsql.ledger import Ledger
    path, tries = sys.argv[1], int(sys.argv[2])
    led = Ledger(path)
    print("ready", flush=True)
    sys.stdin.readline()
    ids, refused = [], 0
    for _ in range(tries):
        try:
            ids.append(led.charge("ann", 0.5, 0.0, epsilon_total=1.0, delta_total=1e-6, mechanism="gaussian",
                                  params={"sigma": 7.0}, rho=Fraction(1, 100), accountant="zcdp"))
        except BudgetExhausted:
            refused += 1
    print(json.dumps({"ids": ids, "refused": refused}), flush=True)
""")


def test_processes_never_overspend_rho(tmp_path):
    path = tmp_path / "ledger.sqlite"      # created by both processes at once
    n = fitting()
    procs = [_python(_SPENDER, str(path), str(n), stdin=subprocess.PIPE) for _ in range(2)]
    reports = _race(procs, timeout=60)
    ids = [i for r in reports for i in r["ids"]]
    assert len(ids) == n == len(set(ids)) and sum(r["refused"] for r in reports) == n
    with Ledger(path) as led:
        assert sorted(r["id"] for r in led.charges()) == sorted(ids)
        assert led.spending("ann", **BUDGET).rho_spent == pytest.approx(n / 100)


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from fractions import Fraction
    from dpsql.ledger import Ledger
    led = Ledger(sys.argv[1])
    row = led.charge("ann", 0.25, 1e-8, epsilon_total=10.0, delta_total=1e-6, mechanism="gaussian",
                     params={"sigma": 4.0}, query="SELECT COUNT(*) FROM t", rho=Fraction(1, 32),
                     zcdp_delta=1e-9, accountant="zcdp")
    print(row, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_killed_process_loses_no_rho(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        zcharge(led)
    proc = _python(_KILLED, str(path))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    with Ledger(path) as led:
        rows = led.charges()
        assert rows[-1]["id"] == int(out) and rows[-1]["rho"] == 1 / 32 and rows[-1]["zcdp_delta"] == 1e-9
        s = led.spending("ann", **BUDGET)
        assert (s.rho_spent, s.delta_spent) == (0.01 + 1 / 32, 1e-9)


# -- migration from version 2 -------------------------------------------------------------------------

_V2 = """
    CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, analyst TEXT NOT NULL, at TEXT NOT NULL,
        epsilon TEXT NOT NULL, delta TEXT NOT NULL, mechanism TEXT NOT NULL, params TEXT NOT NULL, query TEXT);
    CREATE INDEX charges_by_analyst ON charges (analyst, id);
    CREATE TABLE spent (analyst TEXT PRIMARY KEY, epsilon TEXT NOT NULL, delta TEXT NOT NULL,
        charges INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE subset_series (analyst TEXT NOT NULL, population TEXT NOT NULL, answered INTEGER NOT NULL,
        named TEXT NOT NULL, unnamed INTEGER NOT NULL, first_at TEXT NOT NULL, last_at TEXT NOT NULL,
        PRIMARY KEY (analyst, population)) WITHOUT ROWID;
    CREATE TABLE answers (analyst TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL, payload TEXT NOT NULL,
        PRIMARY KEY (analyst, key)) WITHOUT ROWID;
"""


def _v2_params(values, selection=None, surcharge=None):
    """What a version 2 Session stored (no grid_sigma: that came with version 3)."""
    out = {"values": [{k: v for k, v in m.params().items() if k != "grid_sigma"} | {"measure": "m"}
                      for m in values]}
    if selection is not None:
        out["partition_selection"] = selection.params() | {"threshold": 40.0, "delta": 5e-9, "l0": 1}
    out["bounding"] = {"bounded": True, "l0": 1, "max_rows_per_unit": 1}
    if surcharge is not None:
        out["subset_selection"] = {"population": "people|count|", "surcharge": surcharge}
    return json.dumps(out)


def _make_v2(path) -> dict[int, Fraction]:
    """A v2 ledger with a Laplace query, a Gaussian query with partition selection, a surcharged
    query, and a row whose parameters say nothing usable; returns the rho each row should get."""
    lap = make_mechanism("laplace", 1.0, 0.5)
    g = make_mechanism("gaussian", 500000.0, 0.25, 5e-9)
    sel = make_mechanism("laplace", 1.0, 0.25)
    rows = [("ann", "0.5", "0", "laplace", _v2_params([lap])),
            ("ann", "0.5", "1E-8", "gaussian", _v2_params([g], sel)),
            ("bob", "1.0", "0", "laplace", _v2_params([lap], surcharge=1.0)),
            ("bob", "0.3", "1E-7", "laplace", json.dumps({"scale": 2.0}))]
    with sqlite3.connect(path) as db:
        db.executescript(_V2)
        for who, eps, dlt, mech, params in rows:
            db.execute("INSERT INTO charges (analyst, at, epsilon, delta, mechanism, params, query)"
                       " VALUES (?, '2026-01-01T00:00:00+00:00', ?, ?, ?, ?, 'SELECT 1')", (who, eps, dlt, mech, params))
        db.execute("INSERT INTO spent VALUES ('ann', '1.0', '1E-8', 2), ('bob', '1.3', '1E-7', 2)")
        db.execute("INSERT INTO subset_series VALUES ('bob', 'people|count|', 1, '[\"1\"]', 0, 'a', 'a')")
        db.execute("PRAGMA user_version = 2")
    g_rho = accounting.rho_of_params(json.loads(rows[1][4]), Decimal("0.5"), Decimal("1E-8"))[0]
    assert g.rho + sel.rho <= g_rho <= (g.rho + sel.rho) * (1 + Fraction(1, 10 ** 15))
    return {1: lap.rho, 2: g_rho, 3: 2 * lap.rho, 4: Fraction(9, 200)}


def test_a_version_2_ledger_is_migrated_in_place(tmp_path):
    path = tmp_path / "v2.sqlite"
    expected = _make_v2(path)
    with Ledger(path) as led:
        rows = {r["id"]: r for r in led.charges()}
        for row_id, rho in expected.items():
            assert Fraction(Decimal(led._conn.execute("SELECT rho FROM charges WHERE id = ?", (row_id,)).fetchone()[0])) \
                == Fraction(accounting.decimal_up(rho))
        assert [rows[i]["zcdp_delta"] for i in (1, 2, 3, 4)] == [0.0, 5e-9, 0.0, 1e-7]
        assert rows[2]["epsilon"] == 0.5 and rows[2]["query"] == "SELECT 1"          # the rest untouched
        # existing analysts keep basic composition; their totals are the old ones, rho summed anew
        ann = led.spending("ann", epsilon_total=10.0, delta_total=1e-6, accountant="zcdp")
        assert ann.accountant == "basic" and (ann.epsilon_spent, ann.delta_spent) == (1.0, 1e-8)
        assert ann.rho_spent == pytest.approx(float(expected[1] + expected[2]))
        led.charge("ann", 9.0, 0.0, epsilon_total=10.0, delta_total=1e-6, **LAPLACE, rho=RHO, accountant="zcdp")
        with pytest.raises(BudgetExhausted):         # basic: 1.0 + 9.0 is all of it
            led.charge("ann", 0.01, 0.0, epsilon_total=10.0, delta_total=1e-6, **LAPLACE, accountant="zcdp")
        # a new analyst gets the policy's accountant
        zcharge(led, "carol")
        assert led.spending("carol", **BUDGET).accountant == "zcdp"
        assert led.subset_state("bob", _subset()).answered == 1                         # series kept
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 3
    assert raw.execute("SELECT analyst, accountant FROM spent ORDER BY analyst").fetchall() == [
        ("ann", "basic"), ("bob", "basic"), ("carol", "zcdp")]
    raw.close()


def _subset():
    from dpsql.ledger import SubsetCharge
    return SubsetCharge("people|count|", frozenset({"2"}), 16)


def test_a_version_2_ledger_opened_by_many_at_once_is_migrated_once(tmp_path):
    path = tmp_path / "v2.sqlite"
    expected = _make_v2(path)
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def open_it() -> None:
        try:
            start.wait()
            with Ledger(path) as led:
                led.spending("ann", **BUDGET)
        except BaseException as err:      # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Ledger(path) as led:
        assert len(led.charges()) == 4
        assert led.spending("bob", **BUDGET).rho_spent == pytest.approx(float(expected[3] + expected[4]))


def test_a_malformed_amount_in_a_version_2_ledger_stops_the_migration(tmp_path):
    path = tmp_path / "v2.sqlite"
    _make_v2(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charges SET epsilon = 'lots' WHERE id = 2")
    with pytest.raises(Exception, match="malformed amount"):
        Ledger(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2       # rolled back: nothing half-done
    raw.close()
