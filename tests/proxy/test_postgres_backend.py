"""The proxy in front of a PostgreSQL backend: clients, parameters, and no leaked engine
connections (pg_stat_activity) after 50 clients come and go."""
from __future__ import annotations

import psycopg
import pytest

from tests.conftest import copy_to_postgres, postgres_database
from tests.proxy.conftest import start_proxy, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_proxy(people_db, postgres_server, tmp_path_factory):
    with postgres_database(postgres_server, "dpsql_proxy_test") as url:
        copy_to_postgres(people_db, url)
        p = start_proxy(url, tmp_path_factory.mktemp("pgproxy"))
        try:
            yield p, postgres_server, psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        finally:
            p.server.stop()
            p.backend.close()


def _connections(server: str, dbname: str) -> int:
    with psycopg.connect(server, autocommit=True) as admin:
        return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname]).fetchone()[0]


def test_queries_and_parameters(pg_proxy):
    proxy, _, _ = pg_proxy
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
        rows = c.execute("SELECT state, COUNT(*) FROM people WHERE age > %s GROUP BY state", [30]).fetchall()
        assert len(rows) == 8
        cur = c.cursor(binary=True)
        assert cur.execute("SELECT AVG(income) FROM people WHERE state = %s", ["CA"]).fetchone()[0] > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM people")


def test_no_leaked_engine_connections(pg_proxy):
    proxy, server, dbname = pg_proxy
    assert wait_for(lambda: proxy.open_sessions() == 0)
    base = _connections(server, dbname)          # the backend's own connection
    for i in range(50):
        c = psycopg.connect(proxy.dsn(f"user{i % 20}"), autocommit=True)
        if i % 2:
            c.execute("SHOW dpsql.budget")
        c.close()
    # no more than before: a connection of an earlier test may still have been closing when `base`
    # was read (pg_stat_activity lags behind), so it can only go down
    assert wait_for(lambda: _connections(server, dbname) <= base, timeout=20), (_connections(server, dbname), base)
