"""The proxy (dpsql serve --backend spark://...) in front of the Spark engine: Backend opens the
engine from the spark:// URL and clones it per client; a psycopg client runs private queries."""
from __future__ import annotations

import psycopg
import pytest

from tests.proxy.conftest import start_proxy, wait_for

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark_proxy(people_spark, tmp_path_factory):
    p = start_proxy(people_spark, tmp_path_factory.mktemp("sparkproxy"))
    try:
        yield p
    finally:
        p.server.stop()
        p.backend.close()


def test_private_queries_through_the_proxy(spark_proxy):
    assert spark_proxy.backend.engine.dialect == "spark"
    with psycopg.connect(spark_proxy.dsn(), autocommit=True) as c:
        n = c.execute("SELECT COUNT(*) FROM people").fetchone()[0]
        assert 1500 < n < 2500                                # 2000 people, noisy
        rows = c.execute("SELECT state, COUNT(*) FROM people WHERE age > %s GROUP BY state", [30]).fetchall()
        assert len(rows) == 8                                 # the public domain of state
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM people")
    assert wait_for(lambda: spark_proxy.open_sessions() == 0)


def test_two_clients_at_once(spark_proxy):
    with psycopg.connect(spark_proxy.dsn("alice"), autocommit=True) as a, \
            psycopg.connect(spark_proxy.dsn("bob"), autocommit=True) as b:
        assert a.execute("SELECT AVG(age) FROM people").fetchone()[0] > 0
        assert b.execute("SELECT kind, COUNT(*) FROM visits GROUP BY kind").fetchall()
