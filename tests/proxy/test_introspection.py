"""Driver introspection through the proxy (answered by the catalog layer, catalog.py): psql's
\\dt and \\d, JDBC's DatabaseMetaData, SQLAlchemy's inspector and ORM-style queries."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.proxy.conftest import CI, PASSWORD
from tests.proxy.test_jdbc import jdbc_classes, run_java  # noqa: F401 - the fixture

PSQL = shutil.which("psql")


def _psql(proxy, command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    return subprocess.run([PSQL, "-h", "127.0.0.1", "-p", str(proxy.port), "-U", "alice", "-d", "test", "-X",
                           "-c", command], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")
def test_psql_dt(proxy):
    r = _psql(proxy, r"\dt")
    assert r.returncode == 0, r.stderr
    assert "people" in r.stdout and "visits" in r.stdout


@pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")
def test_psql_d_people(proxy):
    r = _psql(proxy, r"\d people")
    assert r.returncode == 0, r.stderr
    for column in ("person_id", "age", "income", "state"):
        assert column in r.stdout
    assert "integer" in r.stdout or "bigint" in r.stdout


def test_jdbc_metadata(proxy, jdbc_classes):  # noqa: F811
    r = run_java(jdbc_classes, proxy.port, "catalog")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    tables = {line.split()[1] for line in lines if line.startswith("table ")}
    assert {"people", "visits"} <= tables
    columns = {line.split()[1] for line in lines if line.startswith("column ")}
    assert {"person_id", "age", "income", "state"} <= columns


def test_sqlalchemy(proxy):
    import sqlalchemy
    url = f"postgresql+psycopg://alice:{PASSWORD.replace(' ', '%20')}@127.0.0.1:{proxy.port}/test"
    engine = sqlalchemy.create_engine(url)
    try:
        insp = sqlalchemy.inspect(engine)
        assert {"people", "visits"} <= set(insp.get_table_names())
        cols = {c["name"] for c in insp.get_columns("people")}
        assert {"person_id", "age", "income"} <= cols
        with engine.connect() as con:
            n = con.execute(sqlalchemy.text("SELECT COUNT(*) FROM people WHERE age > :a"), {"a": 30}).scalar()
            assert isinstance(n, float) and n > 0
            people = sqlalchemy.Table("people", sqlalchemy.MetaData(), autoload_with=con)
            q = sqlalchemy.select(sqlalchemy.func.count()).select_from(people).where(people.c.age > 40)
            assert con.execute(q).scalar() > 0
    finally:
        engine.dispose()
