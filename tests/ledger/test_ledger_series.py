"""Ledger schema v2: subset-query series under a cap, the answer cache, and the v1 -> v2 migration."""
from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from dpsql.errors import QueryRejected
from dpsql.ledger import MAX_NAMED, SCHEMA_VERSION, Ledger, SubsetCharge

BUDGET = {"epsilon_total": 100.0, "delta_total": 1e-6}
LAPLACE = {"mechanism": "laplace", "params": {"scale": 2.0}}


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def subset(named=(), cap=2, population="people | COUNT(*) | all rows") -> SubsetCharge:
    return SubsetCharge(population, frozenset(named), cap)


def charge(led, sub=None, analyst="ann", epsilon=1.0):
    return led.charge(analyst, epsilon, 0.0, **BUDGET, **LAPLACE, subset=sub)


def test_a_fixed_cap_refuses_the_next_query_and_records_nothing(ledger):
    charge(ledger, subset({"id=1"}))
    charge(ledger, subset({"id=2"}))
    before = ledger.spending("ann", **BUDGET)
    with pytest.raises(QueryRejected) as info:
        charge(ledger, subset({"id=3"}))
    assert info.value.sqlstate == "42501" and "allows 2" in str(info.value) and "Dinur" in str(info.value)
    assert ledger.spending("ann", **BUDGET) == before and len(ledger.charges("ann")) == 2
    # another population, another analyst and a plain query are not affected
    charge(ledger, subset({"id=3"}, population="people | SUM(income) | all rows"))
    charge(ledger, subset({"id=3"}), analyst="bob")
    charge(ledger)
    assert [s.answered for s in ledger.subset_series("ann")] == [2, 1]


def test_the_cap_rule_sees_the_union_of_named_values(ledger):
    seen = []

    def cap(named):
        seen.append(named)
        return 10

    charge(ledger, subset({"id=1", "id=2"}, cap=cap))
    charge(ledger, subset({"id=2", "id=3"}, cap=cap))
    charge(ledger, subset(set(), cap=cap))             # a range: names nothing -> unknown from now on
    charge(ledger, subset({"id=9"}, cap=cap))
    assert seen == [2, 3, None, None]
    state = ledger.subset_state("ann", subset({"id=4"}, cap=cap))
    assert (state.answered, state.named) == (4, None)


def test_subset_state_does_not_count_the_query(ledger):
    charge(ledger, subset({"id=1"}, cap=5))
    st = ledger.subset_state("ann", subset({"id=1", "id=7"}, cap=lambda n: n))
    assert (st.answered, st.cap, st.named) == (1, 2, 2)
    assert ledger.subset_state("ann", subset({"id=1"}, population="other", cap=3)).answered == 0


def test_named_values_saturate(ledger):
    many = {f"id={i}" for i in range(MAX_NAMED + 50)}
    seen = []
    charge(ledger, subset(many, cap=lambda n: seen.append(n) or 5))
    charge(ledger, subset({"id=-1"}, cap=lambda n: seen.append(n) or 5))
    assert seen == [MAX_NAMED, MAX_NAMED]


def test_threads_cannot_overrun_the_cap(tmp_path):
    path = tmp_path / "ledger.sqlite"
    results: list[str] = []

    def worker(i: int) -> None:
        with Ledger(path) as led:
            try:
                charge(led, subset({f"id={i}"}, cap=3))
                results.append("ok")
            except QueryRejected:
                results.append("refused")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ok"] * 3 + ["refused"] * 5
    with Ledger(path) as led:
        assert [s.answered for s in led.subset_series("ann")] == [3]
        assert len(led.charges("ann")) == 3


def test_answer_cache_keeps_answers_per_analyst_for_a_lifetime(ledger, monkeypatch):
    ledger.remember("ann", "k1", '{"rows": [1]}', max_age=60)
    assert ledger.cached("ann", "k1", 60) == '{"rows": [1]}'
    assert ledger.cached("bob", "k1", 60) is None and ledger.cached("ann", "k2", 60) is None
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 61)
    assert ledger.cached("ann", "k1", 60) is None           # expired
    ledger.remember("ann", "k2", "{}", max_age=60)            # prunes what expired
    with sqlite3.connect(ledger.path) as db:
        assert [k for (k,) in db.execute("SELECT key FROM answers")] == ["k2"]


def test_answers_survive_reopening(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        led.remember("ann", "k", "payload", max_age=60)
        charge(led, subset({"id=1"}, cap=1))
    with Ledger(path) as led:
        assert led.cached("ann", "k", 60) == "payload"
        with pytest.raises(QueryRejected):
            charge(led, subset({"id=2"}, cap=1))


def test_a_version_1_ledger_is_migrated_in_place(tmp_path):
    path = tmp_path / "v1.sqlite"
    with sqlite3.connect(path) as db:      # the version 1 schema, with one charge
        db.executescript("""
            CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, analyst TEXT NOT NULL, at TEXT NOT NULL,
                epsilon TEXT NOT NULL, delta TEXT NOT NULL, mechanism TEXT NOT NULL, params TEXT NOT NULL, query TEXT);
            CREATE TABLE spent (analyst TEXT PRIMARY KEY, epsilon TEXT NOT NULL, delta TEXT NOT NULL,
                charges INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO charges (analyst, at, epsilon, delta, mechanism, params, query)
                VALUES ('ann', '2026-01-01T00:00:00+00:00', '0.5', '0', 'laplace', '{}', 'SELECT 1');
            INSERT INTO spent VALUES ('ann', '0.5', '0', 1);
            PRAGMA user_version = 1;
        """)
    with Ledger(path) as led:
        assert led.spending("ann", **BUDGET).epsilon_spent == 0.5
        charge(led, subset({"id=1"}))
        led.remember("ann", "k", "x", 60)
        assert led.spending("ann", **BUDGET).epsilon_spent == 1.5
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


def test_a_cache_write_leaves_charges_fully_synchronous(ledger):
    ledger.remember("ann", "k", "payload", max_age=60)
    with ledger._use() as db:
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2      # FULL
