"""Issue 33: the per-analyst query limit queues, and the release timing holds no slot or thread.

- [server] max_concurrent_queries queues a statement (first come, first served, on the event
  loop) for at most [server] query_wait seconds, then refuses it (53400); a CancelRequest or a
  disconnect ends the wait and frees its place (limits.QuerySlots.wait, SharedQuerySlots.wait);
- a private answer waiting for its release time ([timing] floor) holds no query slot and no
  worker thread, and nothing of it (not its RowDescription) reaches the client before the floor
  (client.Client._hold).
"""
from __future__ import annotations

import asyncio
import threading
import socket
import time

import psycopg
import pytest

from dpsql.frontends.pgwire.limits import QuerySlots, SharedQuerySlots, TooManyQueries
from tests.proxy import wire
from tests.proxy.conftest import SlowEngine, start_proxy, wait_for
from tests.proxy.test_server_limits import Background, raw_login, sqlstate
from tests.proxy.wire import read_messages as _read

DEADLINE = 60.0
ENGINE_SECONDS = 0.3        # each query of the `queued` proxy's analysts holds its slot this long
FLOOR = 1.0                 # the `held` proxy's release floor


# -- the slots alone ----------------------------------------------------------------------------------

def _run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("shared", [False, True])
def test_waiters_are_served_first_come_first_served(shared, tmp_path):
    async def main():
        slots = SharedQuerySlots(2, tmp_path) if shared else QuerySlots(2)
        await slots.wait("ann", 5)
        await slots.wait("ann", 5)
        order = []

        async def one(i):
            await slots.wait("ann", 10)
            order.append(i)
        tasks = []
        for i in range(6):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(0.01)            # queued in this order
        assert order == []
        await slots.wait("bob", 0.01)           # another analyst is not queued behind ann
        for _ in range(6):
            slots.release("ann")
            await asyncio.sleep(0.1)
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4, 5]
        assert slots.running("ann") == 2
    _run(main())


@pytest.mark.parametrize("shared", [False, True])
def test_the_wait_times_out_with_53400(shared, tmp_path):
    async def main():
        slots = SharedQuerySlots(1, tmp_path) if shared else QuerySlots(1)
        await slots.wait("ann", 1)
        t0 = time.monotonic()
        with pytest.raises(TooManyQueries) as err:
            await slots.wait("ann", 0.3)
        assert time.monotonic() - t0 >= 0.3
        assert err.value.sqlstate == "53400" and "query_wait" in str(err.value)
        with pytest.raises(TooManyQueries):
            await slots.wait("ann", 0)                  # query_wait 0: refused at once
        slots.release("ann")
        await slots.wait("ann", 0.3)                    # the timed-out waiter left no trace
        assert slots.running("ann") == 1
    _run(main())


@pytest.mark.parametrize("shared", [False, True])
def test_a_cancelled_waiter_frees_its_place(shared, tmp_path):
    async def main():
        slots = SharedQuerySlots(1, tmp_path) if shared else QuerySlots(1)
        await slots.wait("ann", 1)
        first = asyncio.create_task(slots.wait("ann", 10))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(slots.wait("ann", 10))
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        slots.release("ann")
        await asyncio.wait_for(second, 5)               # the slot went to the next, not the cancelled
        assert slots.running("ann") == 1
        slots.release("ann")
        assert slots.running("ann") == 0
        if not shared:
            assert slots.waiting("ann") == 0
    _run(main())


def test_a_slot_handed_to_a_waiter_that_just_left_is_given_back():
    """release() hands the slot to the first waiter; if that waiter is cancelled before it wakes,
    it gives the slot back instead of keeping it."""
    async def main():
        slots = QuerySlots(1)
        await slots.wait("ann", 1)
        waiter = asyncio.create_task(slots.wait("ann", 10))
        await asyncio.sleep(0.01)
        slots.release("ann")                 # handed over: the wake-up is scheduled, not yet run
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.running("ann") == 0
        await slots.wait("ann", 0.1)
    _run(main())


# -- through the proxy --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def queued(people_db, tmp_path_factory):
    """Four queries per analyst, a queue of 30 s, engine runs of ENGINE_SECONDS for user*."""
    p = start_proxy(people_db, tmp_path_factory.mktemp("queued"), policy={
        "server": {"max_concurrent_queries": 4, "query_wait": 30, "max_connections_per_analyst": 20},
        })
    inner = p.backend.session

    def session(analyst, **kw):
        s = inner(analyst, **kw)
        if analyst.startswith("user"):
            s.engine = SlowEngine(s.engine, ENGINE_SECONDS)
        return s
    p.backend.session = session
    yield p
    p.server.stop()
    p.backend.close()


def test_sixteen_connections_with_a_limit_of_four_are_all_answered(queued):
    """A BI tool's pool of 16 connections, one analyst, 4 slots: every query waits its turn and
    is answered, none refused; never more than 4 run at once."""
    slots = queued.server.server.slots
    most, queued_seen = [0], [0]
    jobs = [Background(queued.dsn("user10"), f"SELECT COUNT(*) FROM people WHERE age > {20 + i}")
            for i in range(16)]
    try:
        def done():
            most[0] = max(most[0], slots.running("user10"))
            queued_seen[0] = max(queued_seen[0], slots.waiting("user10"))
            return all(not j.thread.is_alive() for j in jobs)
        assert wait_for(done, timeout=DEADLINE)
        for job in jobs:
            value, err = job.result()
            assert err is None and value is not None
    finally:
        for job in jobs:
            job.close()
    assert most[0] <= 4
    assert queued_seen[0] > 0                        # the queue was used
    assert wait_for(lambda: slots.running("user10") == 0, timeout=DEADLINE)


def test_the_wait_timeout_gives_53400(queued, monkeypatch):
    slots = queued.server.server.slots
    monkeypatch.setattr(queued.server.server, "query_wait", 0.5)
    for _ in range(4):
        slots.acquire("user11")
    try:
        with psycopg.connect(queued.dsn("user11"), autocommit=True) as c:
            spent = c.execute("SHOW dpsql.budget").fetchone()[1]
            t0 = time.monotonic()
            with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as err:
                c.execute("SELECT COUNT(*) FROM people WHERE age > 33")
            assert time.monotonic() - t0 >= 0.5
            assert sqlstate(err.value) == "53400"
            assert "query_wait" in str(err.value) and "max_concurrent_queries" in str(err.value)
            c.execute("SET application_name = 'housekeeping is not queued'")
            assert c.execute("SHOW dpsql.budget").fetchone()[1] == pytest.approx(spent)   # nothing charged
    finally:
        for _ in range(4):
            slots.release("user11")
    assert slots.running("user11") == 0


# -- the release timing on the event loop --------------------------------------------------------------

@pytest.fixture(scope="module")
def held(people_db, tmp_path_factory):
    """One query slot per analyst, refused at once beyond it, answers released at FLOOR s."""
    p = start_proxy(people_db, tmp_path_factory.mktemp("held"), policy={
        "server": {"max_concurrent_queries": 1, "query_wait": 0},
        "timing": {"floor": FLOOR}})
    yield p
    p.server.stop()
    p.backend.close()


def test_a_held_answer_holds_no_slot_and_no_worker(held):
    """Two private queries of one analyst with ONE slot (query_wait 0: refused at once if it is
    taken), the second sent while the first's answer waits for its release time: both are
    answered, so the first gave its slot (and its worker) back when its answer was ready; each
    answer arrives no earlier than the floor after its query was sent."""
    server = held.server.server
    dsn = held.dsn("user14")

    def holding():
        return [c for c in list(server.clients.values()) if c.user == "user14" and c.held_until is not None]
    with psycopg.connect(dsn, autocommit=True) as b:
        t0 = time.monotonic()
        first = Background(dsn, "SELECT COUNT(*) FROM people WHERE age > 31")
        try:
            assert wait_for(lambda: bool(holding()), timeout=DEADLINE)
            assert server.slots.running("user14") == 0
            assert not any(c.running for c in holding())              # no worker holds it either
            t1 = time.monotonic()
            assert b.execute("SELECT COUNT(*) FROM people WHERE age > 32").fetchone() is not None
            assert time.monotonic() - t1 >= FLOOR
            value, err = first.result()
            assert err is None and value
            assert time.monotonic() - t0 >= FLOOR
        finally:
            first.close()
        assert b.execute("SELECT relname FROM pg_class WHERE relname = 'people'").fetchone() == ("people",)


def test_nothing_of_the_answer_arrives_before_the_floor(held):
    """On the wire: after a private query is sent, not one byte (no RowDescription, no
    DataRow, no error) arrives before the floor; then the whole answer does. The analyst `poor`
    can pay for one query: the second's error (budget exhausted, raised where the query is
    charged) is held the same way."""
    s = raw_login(held.port, "poor")
    errors = []
    try:
        for sql in ("SELECT COUNT(*) FROM people WHERE age > 35",
                    "SELECT COUNT(*) FROM people WHERE age > 36"):
            t0 = time.monotonic()
            s.sendall(wire.query_message(sql))
            s.settimeout(max(0.01, FLOOR - 0.05))
            with pytest.raises(socket.timeout):
                s.recv(1)
            msgs = _read(s)
            assert time.monotonic() - t0 >= FLOOR
            kinds = [k for k, _ in msgs]
            assert kinds[-1] == "Z" and ("T" in kinds or "E" in kinds)
            errors.append("E" in kinds)
        assert errors == [False, True]
    finally:
        s.close()


def test_a_cancel_request_ends_a_query_waiting_for_a_slot(queued):
    """psycopg's cancel() (a CancelRequest on a new connection) while the query waits for a slot:
    the query ends with 57014, its place in the line is freed, and the connection stays usable."""
    slots = queued.server.server.slots
    for _ in range(4):
        slots.acquire("user12")
    try:
        with psycopg.connect(queued.dsn("user12"), autocommit=True) as c:
            out: list = []

            def run():
                try:
                    c.execute("SELECT COUNT(*) FROM people WHERE age > 34")
                    out.append("answered")
                except psycopg.Error as err:
                    out.append(sqlstate(err))
            t = threading.Thread(target=run, daemon=True)
            t.start()
            assert wait_for(lambda: slots.waiting("user12") == 1, timeout=DEADLINE)
            (c.cancel_safe if hasattr(c, "cancel_safe") else c.cancel)()     # cancel(): keeps the GIL (test_server_limits)
            t.join(DEADLINE)
            assert not t.is_alive() and out == ["57014"]
            assert slots.waiting("user12") == 0
    finally:
        for _ in range(4):
            slots.release("user12")
    assert slots.running("user12") == 0
