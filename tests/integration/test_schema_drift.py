"""Schema drift: the facts a guarantee relies on are checked when a query runs, not cached.

The PRIMARY KEY shortcut skips per-unit bounding when the engine guarantees one row per unit.
That fact, and every other one a plan relies on (column types, NOT NULL, a relation being a base
table), is checked again in each query's own transaction (PostgreSQL: after LOCK TABLE ... IN
ACCESS SHARE MODE, so DDL waits for the query); when one no longer holds, nothing runs and
nothing is charged, the Session re-reads the schema and plans the query again.

The attack: an administrator drops the key and one person gains 500 rows at the top of the
income bounds; a server that still took the shortcut would release a SUM moved by about 500x
its claimed sensitivity.
"""
from __future__ import annotations

import duckdb
import psycopg
import pytest

import dpsql
from dpsql.errors import PolicyError, QueryRejected, SchemaChanged
from tests.conftest import (
    copy_to_postgres,
    make_people_db,
    policy_for,
    postgres_database,
)
from tests.proxy.conftest import start_proxy

UPPER = 500_000          # the demo policy's income bound
EXTRA = 500              # rows the planted person gains


def _policy(tmp_path, **over) -> dict:
    pol = policy_for(tmp_path, epsilon=1000.0, **over)
    pol["defaults"] = {"epsilon": 1.0, "mechanism": "laplace"}
    pol["reconstruction"] = {"cache_lifetime": 0}
    pol["timing"] = {"quantum": 0, "floor": 0}
    return pol


# ---------------------------------------------------------------------------------- PostgreSQL

@pytest.fixture
def pg_db(people_db, postgres_server):
    with postgres_database(postgres_server, "dpsql_drift_test") as url:
        copy_to_postgres(people_db, url)
        yield url


def _drop_key_and_plant(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("ALTER TABLE people_pk DROP CONSTRAINT people_pk_pkey")
        admin.execute("INSERT INTO people_pk SELECT p.* FROM people_pk p, generate_series(1, %s) "
                      "WHERE p.person_id = (SELECT min(person_id) FROM people_pk)", [EXTRA])
        admin.execute("UPDATE people_pk SET income = %s WHERE person_id = (SELECT min(person_id) FROM people_pk)",
                      [UPPER])


def _true_sum(url: str) -> float:
    with psycopg.connect(url) as c:
        return float(c.execute("SELECT SUM(LEAST(GREATEST(income, 0), 500000)) FROM people_pk").fetchone()[0])


@pytest.mark.postgres
def test_bounding_resumes_under_a_running_proxy(pg_db, tmp_path):
    """The proxy's backend read the schema once, at start; the key is dropped under it."""
    proxy = start_proxy(pg_db, tmp_path, policy={"reconstruction": {"cache_lifetime": 0},
                                                  "timing": {"quantum": 0, "floor": 0}})
    try:
        with psycopg.connect(proxy.dsn(), autocommit=True) as c:
            c.execute("SET dpsql.epsilon = 1")
            before = c.execute("SELECT SUM(income) FROM people_pk").fetchone()[0]
            explain = " ".join(str(r) for r in c.execute("EXPLAIN DP SELECT SUM(income) FROM people_pk").fetchall())
            assert "unique" in explain.lower() or "primary key" in explain.lower()
            _drop_key_and_plant(pg_db)
            unbounded_truth = _true_sum(pg_db)
            after = c.execute("SELECT SUM(income) FROM people_pk").fetchone()[0]
            spent = c.execute("SHOW dpsql.budget").fetchone()
        # Bounded: the planted person counts once (max_rows_per_unit = 1), at most UPPER; the
        # shortcut would have added EXTRA * UPPER = 2.5e8. Laplace noise at epsilon 1 and
        # sensitivity 5e5 exceeds 2.5e7 with probability e^-50.
        assert abs(after - before) < 2.5e7, (before, after, unbounded_truth)
        assert unbounded_truth - before > 2e8
        assert spent[1] == pytest.approx(2.0)          # two answers, nothing charged for the retry
        assert proxy.backend.schema.unique_units == frozenset()     # later sessions start from it
    finally:
        proxy.server.stop()
        proxy.backend.close()


@pytest.mark.postgres
def test_every_fact_is_checked_in_the_query_transaction(pg_db, tmp_path):
    """DDL issued between the check and the query waits for the query: the lock is held from
    before the facts are read until the transaction ends."""
    blocked = []

    with dpsql.connect(pg_db, policy=_policy(tmp_path), analyst="a") as conn:
        session = conn.session
        original = session.ledger.charge_with_spending

        def charge(*a, **kw):        # runs inside the transaction, after the check
            with psycopg.connect(pg_db, autocommit=True) as admin:
                admin.execute("SET lock_timeout = '300ms'")
                try:
                    admin.execute("ALTER TABLE people_pk DROP CONSTRAINT people_pk_pkey")
                except psycopg.errors.LockNotAvailable:
                    blocked.append(True)
            return original(*a, **kw)

        session.ledger.charge_with_spending = charge
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM people_pk")
        assert blocked == [True]
        session.ledger.charge_with_spending = original
        cur.execute("SELECT COUNT(*) FROM people_pk")      # the key still stands: no retry needed
        assert session.schema.unique_units == frozenset({"people_pk"})


@pytest.mark.postgres
def test_a_changed_type_or_a_dropped_table_refuses_before_any_charge(pg_db, tmp_path):
    with dpsql.connect(pg_db, policy=_policy(tmp_path), analyst="a") as conn:
        cur = conn.cursor()
        cur.execute("SELECT AVG(income) FROM people")
        spent = conn.session.spending().epsilon_spent
        with psycopg.connect(pg_db, autocommit=True) as admin:
            admin.execute("DROP VIEW people_view")
            admin.execute("ALTER TABLE people ALTER COLUMN income TYPE text")
        with pytest.raises(PolicyError, match="income"):     # bounds on a text column: refused
            cur.execute("SELECT AVG(income) FROM people")
        with psycopg.connect(pg_db, autocommit=True) as admin:
            admin.execute("DROP TABLE visits")
        with pytest.raises(PolicyError):
            cur.execute("SELECT COUNT(*) FROM visits")
        assert conn.session.spending().epsilon_spent == spent


@pytest.mark.postgres
def test_a_public_table_replaced_by_a_view_is_refused(pg_db, tmp_path):
    """A view in a public table's place could read a protected table row by row."""
    with dpsql.connect(pg_db, policy=_policy(tmp_path), analyst="a") as conn:
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM regions")
        with psycopg.connect(pg_db, autocommit=True) as admin:
            admin.execute("DROP TABLE regions")
            admin.execute("CREATE VIEW regions AS SELECT CAST(person_id AS text) AS state, "
                          "CAST(income AS text) AS region FROM people")
        with pytest.raises(QueryRejected, match="view"):
            cur.execute("SELECT state, region FROM regions")


@pytest.mark.postgres
def test_engine_reports_a_changed_fact_and_runs_nothing(pg_db):
    from dpsql.engines.postgres import PostgresEngine
    e = PostgresEngine(pg_db)
    try:
        facts = e.facts(["people_pk", "regions", "nope"])
        assert set(facts) == {"people_pk", "regions"}
        assert facts["people_pk"].unique == {"person_id"} and "person_id" in facts["people_pk"].not_null
        called = []
        assert e.run("SELECT COUNT(*) FROM people_pk", expect=facts, before=lambda: called.append(1)).rows
        assert called == [1]
        with psycopg.connect(pg_db, autocommit=True) as admin:
            admin.execute("ALTER TABLE people_pk DROP CONSTRAINT people_pk_pkey")
        with pytest.raises(SchemaChanged):
            e.run("SELECT COUNT(*) FROM people_pk", expect=facts, before=lambda: called.append(2))
        assert called == [1]                 # the charge is never reached
        with pytest.raises(SchemaChanged):
            e.run("SELECT COUNT(*) FROM gone", expect={"gone": facts["regions"]}, before=lambda: called.append(3))
        assert called == [1]
        assert e.run("SELECT 1").rows == [(1,)]          # the connection is usable afterwards
    finally:
        e.close()


# ---------------------------------------------------------------------------------- DuckDB

def test_duckdb_connection_of_its_owner_is_checked(tmp_path):
    """A DuckDB connection passed in by its owner, who changes the schema from another cursor."""
    path = make_people_db(str(tmp_path / "drift.duckdb"))
    owner = duckdb.connect(path)
    try:
        with dpsql.connect(owner, policy=_policy(tmp_path), analyst="a") as conn:
            cur = conn.cursor()
            cur.execute("SET dpsql.epsilon = 1")
            cur.execute("SELECT SUM(income) FROM people_pk")
            before = cur.fetchone()[0]
            assert conn.session.schema.unique_units == frozenset({"people_pk"})
            admin = owner.cursor()
            admin.execute("CREATE TABLE p2 AS SELECT * FROM people_pk")
            admin.execute("DROP TABLE people_pk")
            admin.execute("ALTER TABLE p2 RENAME TO people_pk")
            admin.execute(f"INSERT INTO people_pk SELECT p.* FROM people_pk p, range({EXTRA}) "
                          "WHERE p.person_id = (SELECT min(person_id) FROM people_pk)")
            admin.execute(f"UPDATE people_pk SET income = {UPPER} WHERE person_id = "
                          "(SELECT min(person_id) FROM people_pk)")
            cur.execute("SELECT SUM(income) FROM people_pk")
            after = cur.fetchone()[0]
            assert conn.session.schema.unique_units == frozenset()
            assert abs(after - before) < 2.5e7
            assert conn.session.spending().epsilon_spent == pytest.approx(2.0)
    finally:
        owner.close()


def test_a_file_dpsql_opened_read_only_cannot_change(tmp_path):
    """Facts of a file dpsql opens itself are fixed while it is open: no writer can open it."""
    path = make_people_db(str(tmp_path / "fixed.duckdb"))
    with dpsql.connect(path, policy=_policy(tmp_path), analyst="a") as conn:
        assert conn.session.engine.facts_fixed
        with pytest.raises(duckdb.Error):
            duckdb.connect(path)            # same process, read-write: refused while dpsql holds it
        conn.cursor().execute("SELECT COUNT(*) FROM people_pk")
