"""Catalog introspection end to end: psql's meta-commands, JDBC DatabaseMetaData, SQLAlchemy
reflection with pandas, and asyncpg, each against the proxy on a loopback port."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.proxy.conftest import CI, PASSWORD

PSQL = shutil.which("psql")
JAVAC = shutil.which("javac")
JDBC_JAR = Path("/usr/share/java/postgresql.jar")


def psql(proxy, command: str) -> subprocess.CompletedProcess:
    args = [PSQL, "-h", "127.0.0.1", "-p", str(proxy.port), "-U", "alice", "-d", "test", "-X", "-c", command]
    env = {**os.environ, "PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "10"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")
def test_psql_dt_lists_the_tables(proxy):
    r = psql(proxy, r"\dt")
    assert r.returncode == 0, r.stderr
    for name in ("people", "visits", "regions"):
        assert f" public | {name} " in r.stdout
    assert "(4 rows)" in r.stdout


@pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")
def test_psql_d_people_shows_columns_and_types_only(proxy):
    r = psql(proxy, r"\d people")
    assert r.returncode == 0, r.stderr
    assert 'Table "public.people"' in r.stdout
    for line in (" person_id | bigint ", " age       | integer ", " income    | double precision "):
        assert line in r.stdout
    r = psql(proxy, r"\dt+")
    assert r.returncode == 0, r.stderr
    assert "0 bytes" in r.stdout


@pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")
def test_psql_statistics_are_refused(proxy):
    r = psql(proxy, "SELECT n_live_tup FROM pg_stat_user_tables")
    assert r.returncode == 1 and "is not allowed" in r.stderr


JAVA = r"""
import java.sql.*;
public class CatalogMeta {
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0], a[1], a[2])) {
      DatabaseMetaData m = c.getMetaData();
      try (ResultSet rs = m.getTables(null, null, "%", new String[]{"TABLE"})) {
        while (rs.next()) System.out.println("table " + rs.getString("TABLE_NAME") + " " + rs.getString("TABLE_TYPE"));
      }
      try (ResultSet rs = m.getColumns(null, null, "people", "%")) {
        while (rs.next()) System.out.println("column " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME")
                                             + " " + rs.getInt("DATA_TYPE"));
      }
      try (ResultSet rs = m.getPrimaryKeys(null, null, "people")) {
        int n = 0; while (rs.next()) n++; System.out.println("primary keys " + n);
      }
      try (ResultSet rs = m.getSchemas()) {
        while (rs.next()) System.out.println("schema " + rs.getString(1));
      }
      try (Statement st = c.createStatement();
           ResultSet rs = st.executeQuery("SELECT state, COUNT(*) AS n FROM people GROUP BY state")) {
        ResultSetMetaData md = rs.getMetaData();
        System.out.println("meta " + md.getColumnTypeName(1) + " " + md.getColumnTypeName(2));
        int n = 0; while (rs.next()) { rs.getObject(1); rs.getObject(2); n++; }
        System.out.println("rows " + n);
      }
    }
  }
}
"""


@pytest.mark.skipif((JAVAC is None or not JDBC_JAR.exists()) and not CI, reason="javac or the PostgreSQL JDBC driver missing")
def test_jdbc_database_metadata(proxy, tmp_path):
    (tmp_path / "CatalogMeta.java").write_text(JAVA)
    subprocess.run([JAVAC, "CatalogMeta.java"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    url = f"jdbc:postgresql://127.0.0.1:{proxy.port}/test?sslmode=disable"
    r = subprocess.run(["java", "-cp", f"{JDBC_JAR}:{tmp_path}", "CatalogMeta", url, "alice", PASSWORD],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for name in ("people", "visits", "regions"):
        assert f"table {name} TABLE" in out
    assert "column person_id int8 -5" in out and "column age int4 4" in out and "column income float8 8" in out
    assert "primary keys 0" in out
    assert "schema public" in out
    assert "rows 8" in out


def test_sqlalchemy_inspect_and_pandas(proxy):
    from urllib.parse import quote

    import pandas as pd
    import sqlalchemy as sa
    engine = sa.create_engine(f"postgresql+psycopg://alice:{quote(PASSWORD)}@127.0.0.1:{proxy.port}/test"
                              "?sslmode=disable")
    try:
        insp = sa.inspect(engine)
        assert {"people", "visits", "regions"} <= set(insp.get_table_names())
        cols = insp.get_columns("people")
        assert [c["name"] for c in cols] == ["person_id", "age", "income", "state", "sex", "education"]
        assert isinstance(cols[0]["type"], sa.BigInteger) and isinstance(cols[2]["type"], sa.Float)
        assert insp.has_table("people") and not insp.has_table("nope")
        assert insp.get_pk_constraint("people")["constrained_columns"] == []
        df = pd.read_sql("SELECT state, COUNT(*) AS n FROM people GROUP BY state", engine)
        assert list(df.columns) == ["state", "n"] and len(df) == 8
    finally:
        engine.dispose()


def test_asyncpg_catalog_and_query(proxy):
    import asyncpg

    async def main():
        c = await asyncpg.connect(host="127.0.0.1", port=proxy.port, user="alice", password=PASSWORD,
                                  database="test", ssl=False)
        try:
            # parameters of catalog statements are described as text (see the catalog's report)
            rel = await c.fetch("SELECT relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                                "ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1", "public")
            rows = await c.fetch("SELECT state, COUNT(*) AS n FROM people GROUP BY state")
            return [r["relname"] for r in rel], rows
        finally:
            await c.close()

    names, rows = asyncio.run(main())
    assert {"people", "visits", "regions"} <= set(names)
    assert len(rows) == 8
