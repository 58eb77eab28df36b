"""psycopg 3 against the proxy: simple and extended protocol, prepared statements, binary
results, error classes, transaction blocks, cancel, and many clients at once."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import errors as pgerr

from tests.proxy.conftest import SLOW_SECONDS, wait_for


def connect(proxy, user="alice", **kw) -> psycopg.Connection:
    return psycopg.connect(proxy.dsn(user), autocommit=kw.pop("autocommit", True), **kw)


def test_simple_query_and_server_parameters(proxy):
    with connect(proxy) as c:
        assert c.info.parameter_status("server_version") == "15.0 (dpsql)"
        assert c.info.parameter_status("integer_datetimes") == "on"
        assert c.info.parameter_status("session_authorization") == "alice"
        assert c.info.backend_pid > 0
        [(n,)] = c.execute("SELECT COUNT(*) FROM people").fetchall()
        assert isinstance(n, float) and 1500 < n < 2500
        rows = c.execute("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY state").fetchall()
        assert [r[0] for r in rows] == ["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"]


def test_server_side_parameters(proxy):
    with connect(proxy) as c:
        cur = c.execute("SELECT COUNT(*) FROM people WHERE age > %s", [30])
        assert cur.description[0].type_code == 701
        assert 0 < cur.fetchone()[0] < 2500
        rows = c.execute("SELECT state, COUNT(*) FROM people WHERE state = %s AND age BETWEEN %s AND %s "
                         "GROUP BY state", ["CA", 20, 60.5]).fetchall()
        assert rows and all(r[0] in {"CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"} for r in rows)
        [(v,)] = c.execute("SHOW dpsql.epsilon").fetchall()
        assert v == 0.5


def test_prepared_statements(proxy):
    with connect(proxy) as c:
        sql = "SELECT COUNT(*) FROM people WHERE age > %s"
        first = [c.execute(sql, [40 + i], prepare=True).fetchone()[0] for i in range(3)]
        assert all(isinstance(x, float) for x in first)
        assert c.execute(sql, [40], prepare=True).fetchone()[0] == first[0]    # cached, free


def test_binary_results(proxy):
    with connect(proxy) as c:
        cur = c.cursor(binary=True)
        cur.execute("SELECT state, COUNT(*) AS n, AVG(age) AS a FROM people WHERE age > %s GROUP BY state "
                    "ORDER BY state", [18])
        rows = cur.fetchall()
        assert [d.type_code for d in cur.description] == [1043, 701, 701]
        assert rows[0][0] == "CA" and isinstance(rows[0][1], float) and isinstance(rows[0][2], float)
        cur.execute("SHOW dpsql.budget")
        (analyst, spent, remaining, dspent, dremaining, rho_spent, rho_remaining, accountant), = cur.fetchall()
        assert accountant == "basic" and rho_spent > 0 and rho_remaining is None
        assert analyst == "alice" and spent > 0 and remaining > 0


def test_error_classes(proxy):
    with connect(proxy) as c:
        with pytest.raises(pgerr.InsufficientPrivilege) as err:
            c.execute("SELECT * FROM people")
        assert isinstance(err.value, psycopg.ProgrammingError)
        assert err.value.diag.message_hint
        with pytest.raises(pgerr.SyntaxError):
            c.execute("SELEC COUNT(*) FROM people")
        with pytest.raises(psycopg.DataError):
            c.execute("SET dpsql.epsilon = -1")
        with pytest.raises(pgerr.InsufficientPrivilege):     # the extended protocol too
            c.execute("SELECT * FROM people WHERE age > %s", [3])
        [(n,)] = c.execute("SELECT COUNT(*) FROM people").fetchall()    # still usable
        assert n > 0
    with connect(proxy, "poor") as c:
        c.execute("SELECT COUNT(*) FROM people WHERE age > 50")
        with pytest.raises(psycopg.OperationalError) as err:
            c.execute("SELECT COUNT(*) FROM people WHERE age > 51")
        assert err.value.sqlstate == "53000"
        assert c.execute("SHOW dpsql.budget").fetchone()[2] == 0


def test_transaction_block_with_an_error(proxy):
    with connect(proxy, autocommit=False) as c:
        c.execute("SELECT COUNT(*) FROM people")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        with pytest.raises(pgerr.InsufficientPrivilege):
            c.execute("SELECT * FROM people")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(pgerr.InFailedSqlTransaction):
            c.execute("SHOW dpsql.budget")
        c.rollback()
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert c.execute("SHOW dpsql.epsilon").fetchone()[0] == 0.5
        c.commit()
        with c.transaction():
            c.execute("SHOW dpsql.analyst")


def test_cancel_a_slow_query(proxy):
    with connect(proxy, "slow") as c:
        before = c.execute("SHOW dpsql.budget").fetchone()[1]
        threading.Timer(0.5, c.cancel_safe if hasattr(c, "cancel_safe") else c.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(pgerr.QueryCanceled) as err:
            c.execute("SELECT COUNT(*) FROM people WHERE age > 20")
        assert err.value.sqlstate == "57014"
        assert time.monotonic() - t0 < SLOW_SECONDS
        after = c.execute("SHOW dpsql.budget").fetchone()[1]
        assert after == pytest.approx(before + 0.5)       # the charge stays in the ledger
        assert c.execute("SHOW dpsql.epsilon").fetchone()[0] == 0.5     # usable


def test_a_slow_query_does_not_block_others(proxy):
    with connect(proxy, "slow2") as slow, connect(proxy, "bob") as quick:
        done = []
        t = threading.Thread(target=lambda: done.append(slow.execute("SELECT COUNT(*) FROM people").fetchone()))
        t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        for _ in range(5):
            quick.execute("SHOW dpsql.budget").fetchone()
        quick.execute("SELECT COUNT(*) FROM people WHERE age < 30").fetchone()
        assert time.monotonic() - t0 < 1.5 and not done
        t.join()
        assert done


def test_sixteen_clients_at_once(proxy):
    def client(i: int):
        with connect(proxy, f"user{i}") as c:
            out = []
            for k in range(3):
                out.append(c.execute("SELECT COUNT(*) FROM people WHERE age > %s", [20 + k]).fetchone()[0])
                out.append(c.execute("SHOW dpsql.budget").fetchone()[1])
            return out

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(client, range(16)))
    assert len(results) == 16
    assert all(r[-1] == pytest.approx(1.5) for r in results)


@pytest.mark.alone          # 50 sessions closed within wait_for's 10 s: not beside a Spark JVM's start
def test_dropped_clients_leave_no_sessions(proxy):
    base = proxy.open_sessions()
    for i in range(50):
        c = connect(proxy, f"user{i % 20}")
        if i % 2:
            c.execute("SHOW dpsql.epsilon")
        c.pgconn.finish()          # abrupt drops without Terminate: test_robustness.py
    assert wait_for(lambda: proxy.open_sessions() == base)
    with connect(proxy) as c:
        c.execute("SHOW dpsql.epsilon")


def test_disconnect_mid_query_cancels_and_closes(proxy):
    c = connect(proxy, "slow")
    before = len(proxy.sessions)
    spent = c.execute("SHOW dpsql.budget").fetchone()[1]
    c.pgconn.send_query(b"SELECT COUNT(*) FROM people WHERE age > 33")
    time.sleep(0.3)
    c.pgconn.finish()
    assert wait_for(lambda: all(s.closed for s in proxy.sessions[:before]), timeout=SLOW_SECONDS)
    with connect(proxy, "slow") as again:
        assert again.execute("SHOW dpsql.budget").fetchone()[1] == pytest.approx(spent + 0.5)


def test_joins_ctes_subqueries_and_bi_wrappers(proxy):
    """The shapes BI tools and analysts send, through psycopg: wrappers keep the inner names."""
    from tests.proxy.test_jdbc import SHAPES
    with psycopg.connect(proxy.dsn("bob"), autocommit=True) as c:
        for sql, n, cols in SHAPES:
            cur = c.execute(sql)
            assert [d.name for d in cur.description] == cols.split(","), sql
            assert len(cur.fetchall()) == n, sql
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="privacy units"):
            c.execute("SELECT COUNT(*) FROM visits v JOIN people p ON v.state = p.state")
