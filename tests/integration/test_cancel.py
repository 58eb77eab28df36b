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
    assert isinstance(outcome.get("error"), dpsql.EngineError), outcome
    assert "cancelled" in str(outcome["error"])
    assert time.monotonic() - started < 20
    cur.execute("SHOW dpsql.budget")
    spent = dict(zip([d[0] for d in cur.description], cur.fetchone()))["epsilon_spent"]
    assert spent == pytest.approx(0.1)        # charged before it ran; the charge stays
    cur.execute("SELECT COUNT(*) FROM t WHERE x < 3")   # the connection is still usable
    assert cur.fetchone()[0] > 0
    conn.close()
