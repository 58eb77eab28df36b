"""Cancelling a running query: the engine stops, the charge stays, nothing is released."""
from __future__ import annotations

import threading
import time

import duckdb
import pytest

import dpsql


@pytest.fixture(params=["duckdb", "postgres"])
def big(request, tmp_path):
    """A table t(id, x) whose private SUM/AVG takes seconds: (target, engine options)."""
    if request.param == "duckdb":
        path = str(tmp_path / "big.duckdb")
        con = duckdb.connect(path)
        con.execute("CREATE TABLE t AS SELECT i AS id, i % 1000 AS x FROM range(30000000) r(i)")
        con.close()
        yield path, {}
        return
    import psycopg
    dsn = request.getfixturevalue("people_pg")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS big CASCADE")
        admin.execute("CREATE SCHEMA big")
        admin.execute("CREATE UNLOGGED TABLE big.t AS SELECT i::bigint AS id, (i % 1000)::int AS x "
                      "FROM generate_series(0, 1999999) i")
    yield dsn, {"schema": "big"}
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS big CASCADE")


def test_cancel_stops_a_running_query_and_keeps_the_charge(tmp_path, big):
    target, options = big
    pol = {"budget": {"epsilon": 10.0, "ledger": str(tmp_path / "l.sqlite")},
           "tables": {"t": {"privacy_unit": "id", "max_rows_per_unit": 2,
                            "columns": {"x": {"lower": 0, "upper": 1000}}}}}
    conn = dpsql.connect(target, policy=pol, analyst="a", **options)
    cur = conn.cursor()
    outcome: dict = {}

    def run():
        try:
            cur.execute("SELECT SUM(x), AVG(x) FROM t")
            outcome["rows"] = cur.fetchall()
        except dpsql.Error as err:
            outcome["error"] = err

    worker = threading.Thread(target=run)
    started = time.monotonic()
    worker.start()
    time.sleep(0.3)
    conn.session.cancel()
    worker.join(30)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), dpsql.QueryCanceled), outcome
    assert "cancelled" in str(outcome["error"])
    assert time.monotonic() - started < 20
    cur.execute("SHOW dpsql.budget")
    spent = dict(zip([d[0] for d in cur.description], cur.fetchone()))["epsilon_spent"]
    assert spent == pytest.approx(0.1)        # charged before it ran; the charge stays
    cur.execute("SELECT COUNT(*) FROM t WHERE x < 3")   # the connection is still usable
    assert cur.fetchone()[0] > 0
    conn.close()


class _CancelAround:
    """An engine that lets a cancel arrive just before it starts the query, or just after it
    finished (the windows an engine's own interrupt would miss)."""

    def __init__(self, inner, session, when: str):
        self.inner, self.session, self.when = inner, session, when

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, sql, params=None, **checks):
        if self.when == "before":
            self.session.cancel()
        rows = self.inner.run(sql, params, **checks)
        if self.when == "after":
            self.session.cancel()
        return rows


@pytest.mark.parametrize("when, charged", [("before", 0.0), ("after", 0.5)])
def test_a_cancel_the_engine_would_miss_is_kept_for_the_statement(people_db, tmp_path, when, charged):
    """Before the engine starts: nothing is charged. After it finished, before release: the
    charge stays and nothing is released. Either way the next statement runs normally."""
    from tests.conftest import policy_for
    conn = dpsql.connect(people_db, policy=policy_for(tmp_path), analyst="a")
    session = conn.session
    inner = session.engine
    session.engine = _CancelAround(inner, session, when)
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.5")
    with pytest.raises(dpsql.QueryCanceled, match="cancelled"):
        cur.execute("SELECT COUNT(*) FROM people")
    assert session.spending().epsilon_spent == pytest.approx(charged)
    session.engine = inner
    cur.execute("SELECT COUNT(*) FROM people")
    assert cur.fetchone()[0] > 0
    conn.close()


def _heavy_conn(people_db, tmp_path, **limits):
    from tests.conftest import policy_for
    pol = policy_for(tmp_path, reconstruction={"cache_lifetime": 3600},
                     limits={"max_released_rows": 1_000_000, **limits})
    return dpsql.connect(people_db, policy=pol, analyst="a")


_HEAVY = ("SELECT WIDTH_BUCKET(age, 0, 100, 199) AS a, WIDTH_BUCKET(income, 0, 200000, 199) AS b, "
          "COUNT(*), MEDIAN(income) FROM people GROUP BY 1, 2")


def _slow_batches(monkeypatch, started: threading.Event, pause: float):
    """The release's batches, each `pause` s slower, and `started` set at the first: a release that
    takes seconds on any machine, so that what stops it is the check between batches."""
    from dpsql.noise import vector
    real = vector.release_values

    def slow(*args, **kwargs):
        started.set()
        time.sleep(pause)
        return real(*args, **kwargs)

    monkeypatch.setattr(vector, "release_values", slow)
    monkeypatch.setattr(vector, "BATCH", 1024)


def test_a_cancel_mid_release_stops_it_promptly_and_the_charge_stays(people_db, tmp_path, monkeypatch):
    """40,000 groups released 1,024 at a time: cancelled between batches, QueryCanceled comes
    within a batch or two, the charge made before the engine ran stays, and nothing was released
    (not even into the answer cache: the repeat is charged again)."""
    conn = _heavy_conn(people_db, tmp_path)
    session = conn.session
    started = threading.Event()
    _slow_batches(monkeypatch, started, 0.05)
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.5")
    outcome: dict = {}

    def run():
        try:
            cur.execute(_HEAVY)
            outcome["rows"] = cur.fetchall()
        except dpsql.Error as err:
            outcome["error"] = err
            outcome["at"] = time.monotonic()

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(60)
    time.sleep(0.2)
    cancelled = time.monotonic()
    session.cancel()
    worker.join(30)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), dpsql.QueryCanceled), outcome.keys()
    assert outcome["at"] - cancelled < 1.0          # 40 batches of 0.05 s would be 2 s more
    assert session.spending().epsilon_spent == pytest.approx(0.5)
    monkeypatch.undo()
    r = session.execute(_HEAVY.replace("COUNT(*), MEDIAN(income)", "COUNT(*)"))
    assert not r.cached and len(r.rows) == 40_000
    assert session.spending().epsilon_spent == pytest.approx(1.0)


def test_the_statement_timeout_holds_for_the_release_too(people_db, tmp_path, monkeypatch):
    """An engine's statement_timeout (PostgreSQL's option) bounds the whole statement: a release
    running past it ends with the engine's own words, the charge kept."""
    conn = _heavy_conn(people_db, tmp_path)
    session = conn.session
    session.engine.statement_timeout = 0.5
    _slow_batches(monkeypatch, threading.Event(), 0.05)
    t0 = time.monotonic()
    with pytest.raises(dpsql.QueryCanceled, match="statement timeout"):
        session.execute(_HEAVY)
    assert time.monotonic() - t0 < 2.0
    assert session.spending().epsilon_spent > 0
    session.engine.statement_timeout = None
    monkeypatch.undo()
    assert session.execute("SELECT COUNT(*) FROM people").rows


def test_work_limits_count_what_the_heavy_query_demands(people_db, tmp_path):
    conn = _heavy_conn(people_db, tmp_path, max_quantile_work=39_999)
    with pytest.raises(dpsql.QueryRejected, match="40000 quantile choices, more than the 39999"):
        conn.session.execute(_HEAVY)
    assert conn.session.spending().epsilon_spent == 0.0
