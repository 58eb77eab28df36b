"""A large answer's rows through the proxy: encoded in batches, stopped by a CancelRequest between
them (dpsql.frontends.pgwire.client.Client._send_rows); the connection stays usable."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from dpsql.frontends.pgwire import client as srv
from tests.proxy.conftest import start_proxy

HEAVY = ("SELECT WIDTH_BUCKET(age, 0, 100, 199) AS a, WIDTH_BUCKET(income, 0, 200000, 199) AS b, COUNT(*) "
         "FROM people GROUP BY 1, 2")


def test_a_cancel_while_rows_are_sent_stops_them(people_db, tmp_path, monkeypatch):
    p = start_proxy(people_db, tmp_path, policy={"limits": {"max_released_rows": 1_000_000}})
    sending = threading.Event()
    real = srv.values.row_encoder

    def slow_encoder(spec):             # 40,000 rows at 1 ms each: 40 s unless stopped
        encode = real(spec)

        def slow(row):
            sending.set()
            time.sleep(0.001)
            return encode(row)
        return slow

    monkeypatch.setattr(srv, "_SEND_BATCH", 100)
    monkeypatch.setattr(srv.values, "row_encoder", slow_encoder)
    try:
        with psycopg.connect(p.dsn("alice"), autocommit=True) as c:
            outcome: dict = {}

            def run():
                try:
                    outcome["rows"] = len(c.execute(HEAVY).fetchall())
                except psycopg.Error as err:
                    outcome["error"] = err

            t = threading.Thread(target=run)
            t.start()
            assert sending.wait(60)
            time.sleep(0.3)
            at = time.monotonic()
            (c.cancel_safe if hasattr(c, "cancel_safe") else c.cancel)()     # cancel_safe keeps the GIL free
            t.join(30)
            assert not t.is_alive()
            assert isinstance(outcome.get("error"), psycopg.errors.QueryCanceled), outcome
            assert time.monotonic() - at < 5
            monkeypatch.setattr(srv.values, "row_encoder", real)
            assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
    finally:
        p.server.stop()
        p.backend.close()
