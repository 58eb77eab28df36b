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
