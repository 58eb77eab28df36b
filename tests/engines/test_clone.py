"""Engine.clone(): its own connection, so queries run concurrently and interrupt()
cancels only the clone's query."""
from __future__ import annotations

import threading
import time

import pytest

from dpsql.engines import open_engine
from dpsql.errors import EngineError, QueryCanceled

# A query that runs for seconds on each engine, and one to check an answer.
_SLOW = {
    "duckdb": "SELECT SUM(a.i * b.i) FROM range(20000) a(i), range(20000) b(i)",
    "postgres": "SELECT 1 FROM pg_sleep(1.5)",
}


@pytest.fixture(params=["duckdb", "postgres"])
def engine(request, people_db):
    target = request.getfixturevalue("people_pg") if request.param == "postgres" else people_db
    e = open_engine(target)
    yield e
    e.close()


def _run(engine, sql: str, out: dict, name: str) -> None:
    started = time.monotonic()
    try:
        out[name] = engine.run(sql).rows
    except (EngineError, QueryCanceled) as err:
        out[name] = err
    out[name + "_seconds"] = time.monotonic() - started


def test_clones_run_concurrently_and_interrupt_only_their_own_query(engine):
    a, b = engine.clone(), engine.clone()
    try:
        assert a.dialect == b.dialect == engine.dialect
        out: dict = {}
        slow = _SLOW[engine.dialect]
        threads = [threading.Thread(target=_run, args=(e, slow, out, n)) for e, n in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        time.sleep(0.3)
        a.interrupt()
        # the original engine is not blocked by its clones
        assert engine.run("SELECT COUNT(*) FROM people").rows == [(2000,)]
        for t in threads:
            t.join(60)
        assert isinstance(out["a"], QueryCanceled) and "cancelled" in str(out["a"]), out
        assert not isinstance(out["b"], EngineError), out
        assert out["a_seconds"] < out["b_seconds"]
        assert b.run("SELECT COUNT(*) FROM visits").rows == engine.run("SELECT COUNT(*) FROM visits").rows
        assert a.run("SELECT 1").rows == [(1,)]           # usable after the cancel
    finally:
        a.close()
        b.close()
    assert engine.run("SELECT 1").rows == [(1,)]          # closing clones leaves the original open


def test_two_slow_postgres_queries_overlap(people_pg):
    engine = open_engine(people_pg)
    a, b = engine.clone(), engine.clone()
    try:
        out: dict = {}
        threads = [threading.Thread(target=_run, args=(e, _SLOW["postgres"], out, n)) for e, n in ((a, "a"), (b, "b"))]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert out["a"] == out["b"] == [(1,)]
        assert time.monotonic() - started < 2.8            # 2 x 1.5 s, run side by side
    finally:
        for e in (a, b, engine):
            e.close()
