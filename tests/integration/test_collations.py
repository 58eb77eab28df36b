"""Collations decide which value labels a group (issue 31).

The attack. A GROUP BY key whose engine equality is not the equality of its text (DuckDB's
COLLATE NOCASE, NOACCENT or NFC, a database default set by `SET default_collation`; a PostgreSQL
ICU collation created with deterministic = false; citext, also under a domain) makes the engine
merge 'CA' and 'ca' into one group and print it with the spelling of the first row it meets. The
release looks that text up in the public domain by exact string: when the one person whose row
is spelled 'ca' is met first, the whole group is dropped and released as 0 plus noise, which
tells that person's spelling at any epsilon (with partition selection the released key is that
person's own spelling).

What must hold: such a column is read by no private query (key, WHERE, ON, COUNT(DISTINCT),
semi-join, unit, link), the facts are read from the engine's catalog and checked again when a
query runs (connections passed in by their owner included), and a DuckDB connection whose
default collation is not binary answers no private query. Each attack is run with the
differently spelled row met first and met last: the query is refused both ways, or, for the
view the refusal asks the data owner for (an exact equality, the domain in its spelling),
answered identically both ways. Every premise (the engine really merges the spellings) is
checked on the engine itself first. The argument: dpsql.analysis.scope.exact_equality.
"""
from __future__ import annotations

import duckdb
import psycopg
import pytest

import dpsql
from dpsql.errors import PolicyError, QueryRejected
from dpsql.noise.rng import SeededRng
from tests.conftest import postgres_database

CROWD = 199                 # rows spelled as the domain spells the value
ORDERS = ("first", "last")  # where the one differently spelled row is met


def _policy(tmp_path, domain=("CA", "NY"), **tables) -> dict:
    pol = {"budget": {"epsilon": 1e9, "delta": 1e-3, "ledger": str(tmp_path / "ledger.sqlite"),
                      "accountant": "basic"},
           "defaults": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},
           "timing": {"quantum": 0, "floor": 0}, "reconstruction": {"cache_lifetime": 0},
           "tables": {"t": {"privacy_unit": "pid", "columns": {"state": {"values": list(domain)},
                                                               "income": {"lower": 0, "upper": 100}}},
                      "t_open": {"privacy_unit": "pid", "source": "t", "columns": {"state": {},
                                                                               "income": {"lower": 0, "upper": 100}}},
                      "u": {"privacy_unit": "uid", "columns": {"income": {"lower": 0, "upper": 100}}}},
           "public": {"tables": ["regions"]}}
    pol["tables"].update(tables)
    return pol


def _rows(order: str, spelled: str, victim: str) -> list[tuple]:
    """pid, state, income: CROWD rows of `spelled`, 20 of NY, and the victim's row first or last."""
    rows = [(i, spelled, 10) for i in range(1, CROWD + 1)] + [(500 + i, "NY", 10) for i in range(20)]
    return [(1000, victim, 10)] + rows if order == "first" else rows + [(1000, victim, 10)]


# Every private query that reads the column `state` (or the unit `uid`), each a place where the
# engine compares it: a key with a public domain, a key through partition selection, WHERE with a
# declared value, COUNT(DISTINCT), a join to a public table, a semi-join, the unit itself.
READS = [
    "SELECT state, COUNT(*) FROM t GROUP BY state",
    "SELECT state, COUNT(*) FROM t_open GROUP BY state",
    "SELECT COUNT(*) FROM t WHERE state = 'CA'",
    "SELECT COUNT(*) FROM t WHERE state IN ('CA', 'NY')",
    "SELECT COUNT(DISTINCT state) FROM t",
    "SELECT r.region, COUNT(*) FROM t JOIN regions r ON r.state = t.state GROUP BY r.region",
    "SELECT COUNT(*) FROM t WHERE pid IN (SELECT pid FROM t_open WHERE state = 'CA')",
    "SELECT COUNT(*), SUM(income) FROM u",
]


def _refused(conn, sql: str) -> QueryRejected:
    with pytest.raises(QueryRejected) as err:
        conn.cursor().execute(sql)
    return err.value


# ------------------------------------------------------------------------------------------- DuckDB

# collation -> (the domain's spelling, the victim's spelling, which the collation holds equal)
DUCK_COLLATIONS = {
    "NOCASE": ("CA", "ca"),
    "NOACCENT": ("CA", "CÀ"),
    "NOACCENT.NOCASE": ("CA", "cà"),
    "NFC": ("CÉ", "CE\u0301"),           # composed and decomposed É
}


def _duck_db(path: str, collation: str | None, order: str, spelled: str, victim: str,
             con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection | None:
    own = con is None
    con = con or duckdb.connect(path)
    coll = f" COLLATE {collation}" if collation else ""
    con.execute(f"CREATE TABLE t (pid INTEGER PRIMARY KEY, state VARCHAR{coll}, income INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", _rows(order, spelled, victim))
    con.execute(f"CREATE TABLE u (uid VARCHAR{coll}, income INTEGER)")
    con.execute("INSERT INTO u VALUES ('Bob', 5), ('bob', 7)")
    con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('CA', 'West'), ('NY', 'East')) v(state, region)")
    con.execute("CREATE VIEW t_lower AS SELECT pid, lower(state) COLLATE \"binary\" AS state, income FROM t")
    con.execute("CREATE VIEW t_lower_nocase AS SELECT pid, lower(state) AS state, income FROM t")
    if own:
        con.close()
        return None
    return con


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("collation", list(DUCK_COLLATIONS))
def test_duckdb_collated_column_is_read_by_no_private_query(tmp_path, collation, order):
    spelled, victim = DUCK_COLLATIONS[collation]
    path = str(tmp_path / "c.duckdb")
    _duck_db(path, collation, order, spelled, victim)
    with duckdb.connect(path, read_only=True) as raw:      # the premise: the engine merges the spellings
        groups = raw.execute("SELECT state FROM t WHERE state <> 'NY' GROUP BY state").fetchall()
        assert len(groups) == 1
    pol = _policy(tmp_path, domain=(spelled, "NY"),
                  t_lower_nocase={"privacy_unit": "pid", "columns": {"state": {"values": [spelled.lower(), "ny"]}}})
    with dpsql.connect(path, policy=pol, analyst="a") as conn:
        for sql in READS + ["SELECT state, COUNT(*) FROM t_lower_nocase GROUP BY state"]:
            err = _refused(conn, sql)
            assert "collation" in str(err) and ("'state'" in str(err) or "'uid'" in str(err)), sql
            assert "lower(col)" in (err.hint or "")
        # what reads neither column is answered
        conn.cursor().execute("SELECT COUNT(*), SUM(income) FROM t")


def test_duckdb_refusal_names_the_unit(tmp_path):
    path = str(tmp_path / "c.duckdb")
    _duck_db(path, "NOCASE", "first", "CA", "ca")
    with dpsql.connect(path, policy=_policy(tmp_path), analyst="a") as conn:
        assert "privacy unit" in str(_refused(conn, "SELECT COUNT(*) FROM u"))


def test_duckdb_exact_view_answers_alike_whichever_spelling_comes_first(tmp_path):
    """The form the refusal asks the data owner for: a view with an exact equality, its domain
    declared in that spelling. The victim's row is one more row of 'ca', wherever it is met: with
    the same seed, the two databases get the same release."""
    released = {}
    for order in ORDERS:
        path = str(tmp_path / f"{order}.duckdb")
        _duck_db(path, "NOCASE", order, "CA", "ca")
        pol = _policy(tmp_path / order, t_lower={"privacy_unit": "pid",
                                                 "columns": {"state": {"values": ["ca", "ny"]}}})
        (tmp_path / order).mkdir()
        with dpsql.connect(path, policy=pol, analyst="a", rng=SeededRng(5)) as conn:
            cur = conn.cursor()
            cur.execute("SET dpsql.epsilon = 1000")
            cur.execute("SELECT state, COUNT(*) AS n FROM t_lower GROUP BY state ORDER BY state")
            released[order] = cur.fetchall()
    rows = released["first"]
    assert [r[0] for r in rows] == ["ca", "ny"]
    assert abs(rows[0][1] - (CROWD + 1)) < 1 and abs(rows[1][1] - 20) < 1
    assert released["first"] == released["last"]


@pytest.mark.parametrize("side", ["key", "link"])
def test_duckdb_link_through_a_collated_column_is_refused(tmp_path, side):
    """A link joins a row to the unit of the row its key names: with 'O1' equal to 'o1' one line
    item would belong to two people. The join dpsql adds reads both columns without the query
    naming them."""
    path = str(tmp_path / "l.duckdb")
    key, link = ("VARCHAR COLLATE NOCASE", "VARCHAR") if side == "key" else ("VARCHAR", "VARCHAR COLLATE NOCASE")
    with duckdb.connect(path) as con:
        con.execute(f"CREATE TABLE orders (okey {key} PRIMARY KEY, pid INTEGER)")
        con.execute(f"CREATE TABLE items (okey {link}, qty INTEGER)")
        con.execute("INSERT INTO orders VALUES ('O1', 1), ('o2', 2)")
        con.execute("INSERT INTO items VALUES ('O1', 3), ('o1', 4), ('O2', 5)")
    pol = _policy(tmp_path)
    pol["tables"] = {"orders": {"privacy_unit": "pid", "columns": {}},
                     "items": {"link": "okey -> orders.okey", "columns": {"qty": {"lower": 0, "upper": 10}}}}
    pol["public"] = {"tables": []}
    with dpsql.connect(path, policy=pol, analyst="a") as conn:
        err = _refused(conn, "SELECT COUNT(*), SUM(qty) FROM items")
        assert ("a link's key" if side == "key" else "(a link)") in str(err)


@pytest.mark.parametrize("order", ORDERS)
def test_duckdb_default_collation_of_a_connection_passed_in(tmp_path, order):
    """The owner's connection compares every VARCHAR under `SET default_collation = 'nocase'`: no
    column of its own needs a collation, and literals (a CASE key 'A' or 'a') are held equal too."""
    con = duckdb.connect()
    try:
        _duck_db("", None, order, "CA", "ca", con=con)
        con.execute("SET default_collation = 'nocase'")
        assert len(con.execute("SELECT state FROM t WHERE state <> 'NY' GROUP BY state").fetchall()) == 1
        with dpsql.connect(con, policy=_policy(tmp_path), analyst="a") as conn:
            for sql in READS + ["SELECT COUNT(*) FROM t",
                                "SELECT CASE WHEN pid = 1000 THEN 'a' ELSE 'A' END AS k, COUNT(*) FROM t GROUP BY 1"]:
                err = _refused(conn, sql)
                assert "default collation" in str(err) or "collation" in str(err), sql
            assert "RESET default_collation" in (_refused(conn, "SELECT COUNT(*) FROM t").hint or "")
    finally:
        con.close()


def test_duckdb_default_collation_set_after_the_schema_was_read(tmp_path):
    """The setting is a fact checked in each query's own transaction: the owner changes it under a
    session that already read the schema, and the next query is refused (the session reads the
    schema again, and plans the query again on it); reset, a new session answers."""
    con = duckdb.connect()
    try:
        _duck_db("", None, "first", "CA", "ca", con=con)
        with dpsql.connect(con, policy=_policy(tmp_path), analyst="a") as conn:
            cur = conn.cursor()
            cur.execute("SELECT state, COUNT(*) FROM t GROUP BY state")
            assert {r[0] for r in cur.fetchall()} == {"CA", "NY"}
            con.execute("SET default_collation = 'nocase'")
            _refused(conn, "SELECT state, COUNT(*) FROM t GROUP BY state")
        con.execute("RESET default_collation")
        with dpsql.connect(con, policy=_policy(tmp_path), analyst="a") as conn:
            cur = conn.cursor()
            cur.execute("SELECT state, COUNT(*) FROM t GROUP BY state")
            assert {r[0] for r in cur.fetchall()} == {"CA", "NY"}
    finally:
        con.close()


def test_duckdb_column_collation_changed_after_the_schema_was_read(tmp_path):
    con = duckdb.connect()
    try:
        _duck_db("", None, "first", "CA", "ca", con=con)
        with dpsql.connect(con, policy=_policy(tmp_path), analyst="a") as conn:
            conn.cursor().execute("SELECT state, COUNT(*) FROM t GROUP BY state")
            con.execute("DROP VIEW t_lower")
            con.execute("DROP VIEW t_lower_nocase")
            con.execute("ALTER TABLE t ALTER COLUMN state SET DATA TYPE VARCHAR COLLATE NOCASE")
            _refused(conn, "SELECT state, COUNT(*) FROM t GROUP BY state")
    finally:
        con.close()


# --------------------------------------------------------------------------------------- PostgreSQL

PG_KINDS = {
    "icu_ci": "text COLLATE ci",         # CREATE COLLATION ci (provider = icu, ..., deterministic = false)
    "citext": "citext",
    "citext_domain": "text_ci",          # CREATE DOMAIN text_ci AS citext: format_type says text_ci
    "domain_ci": "dci",                  # CREATE DOMAIN dci AS text COLLATE ci
}


@pytest.fixture(scope="module")
def pg_collations(postgres_server):
    """A database with the nondeterministic ICU collation `ci`, citext (when the server has the
    extension: what is missing is skipped with its reason) and the domains over them."""
    with postgres_database(postgres_server, "dpsql_collations") as url:
        missing = {}
        with psycopg.connect(url, autocommit=True) as admin:
            try:
                admin.execute("CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
                admin.execute("CREATE DOMAIN dci AS text COLLATE ci")
            except psycopg.Error as err:
                missing["icu_ci"] = missing["domain_ci"] = f"no ICU collations on this server: {err}"
            try:
                admin.execute("CREATE EXTENSION IF NOT EXISTS citext")
                admin.execute("CREATE DOMAIN text_ci AS citext")
            except psycopg.Error as err:
                missing["citext"] = missing["citext_domain"] = f"the citext extension is not available: {err}"
        yield url, missing


def _pg_tables(url: str, kind: str, order: str, schema: str) -> None:
    typ = PG_KINDS[kind]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"SET search_path = {schema}, public")
        admin.execute(f"CREATE TABLE t (pid integer PRIMARY KEY, state {typ}, income integer)")
        with admin.cursor().copy("COPY t (pid, state, income) FROM STDIN") as cp:
            for row in _rows(order, "CA", "ca"):
                cp.write_row(row)
        admin.execute(f"CREATE TABLE u (uid {typ}, income integer)")
        admin.execute("INSERT INTO u VALUES ('Bob', 5), ('bob', 7)")
        admin.execute("CREATE TABLE regions (state text, region text)")
        admin.execute("INSERT INTO regions VALUES ('CA', 'West'), ('NY', 'East')")
        lower = "lower(state)" if kind in ("icu_ci", "domain_ci") else "lower(state::text)"
        admin.execute(f"CREATE VIEW t_lower AS SELECT pid, {lower} COLLATE \"C\" AS state, income FROM t")
        admin.execute(f"CREATE VIEW t_lower_loose AS SELECT pid, lower(state) AS state, income FROM t")


@pytest.mark.postgres
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", list(PG_KINDS))
def test_postgres_nondeterministic_column_is_read_by_no_private_query(pg_collations, tmp_path, kind, order):
    url, missing = pg_collations
    if kind in missing:
        pytest.skip(missing[kind])
    schema = f"c_{kind}_{order}"
    _pg_tables(url, kind, order, schema)
    with psycopg.connect(url) as raw:                # the premise: the engine merges the spellings
        raw.execute(f"SET search_path = {schema}, public")
        assert len(raw.execute("SELECT state FROM t WHERE state <> 'NY' GROUP BY state").fetchall()) == 1
    loose = {"privacy_unit": "pid", "columns": {"state": {"values": ["ca", "ny"]}}}
    pol = _policy(tmp_path, t_lower_loose=loose)
    if kind != "icu_ci":
        # dpsql reads citext and domains (public.text_ci, public.dci: outside its search_path) as
        # types of their own, where no value domain can be declared (a PolicyError at connect):
        # declared without one, the column is still refused wherever a query reads it
        pol["tables"]["t"]["columns"]["state"] = {}
        with pytest.raises(PolicyError):
            dpsql.connect(url, policy=_policy(tmp_path), analyst="a", schema=schema)
    with dpsql.connect(url, policy=pol, analyst="a", schema=schema) as conn:
        reads = READS + (["SELECT state, COUNT(*) FROM t_lower_loose GROUP BY state"]
                         if kind in ("icu_ci", "domain_ci") else [])   # lower(citext) is text: exact
        for sql in reads:
            err = _refused(conn, sql)
            assert "collation" in str(err) and ("'state'" in str(err) or "'uid'" in str(err)), sql
        conn.cursor().execute("SELECT COUNT(*), SUM(income) FROM t")


@pytest.mark.postgres
def test_postgres_exact_view_answers_alike_whichever_spelling_comes_first(pg_collations, tmp_path):
    url, missing = pg_collations
    if "icu_ci" in missing:
        pytest.skip(missing["icu_ci"])
    released = {}
    for order in ORDERS:
        schema = f"c_fix_{order}"
        _pg_tables(url, "icu_ci", order, schema)
        (tmp_path / order).mkdir()
        pol = _policy(tmp_path / order, t_lower={"privacy_unit": "pid",
                                                 "columns": {"state": {"values": ["ca", "ny"]}}})
        with dpsql.connect(url, policy=pol, analyst="a", schema=schema, rng=SeededRng(5)) as conn:
            cur = conn.cursor()
            cur.execute("SET dpsql.epsilon = 1000")
            cur.execute("SELECT state, COUNT(*) AS n FROM t_lower GROUP BY state ORDER BY state")
            released[order] = cur.fetchall()
    rows = released["first"]
    assert [r[0] for r in rows] == ["ca", "ny"]
    assert abs(rows[0][1] - (CROWD + 1)) < 1 and abs(rows[1][1] - 20) < 1
    assert released["first"] == released["last"]


@pytest.mark.postgres
def test_postgres_collation_changed_under_a_session_is_caught_when_the_query_runs(pg_collations, tmp_path):
    """The owner gives the column the nondeterministic collation after the session read the
    schema: the facts checked in the query's own transaction (after LOCK TABLE) differ, the
    session reads the schema again, and the query is refused."""
    url, missing = pg_collations
    if "icu_ci" in missing:
        pytest.skip(missing["icu_ci"])
    schema = "c_drift"
    _pg_tables(url, "icu_ci", "first", schema)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"SET search_path = {schema}, public")
        admin.execute("DROP VIEW t_lower, t_lower_loose")
        admin.execute("ALTER TABLE t ALTER COLUMN state TYPE text COLLATE \"default\"")
    with dpsql.connect(url, policy=_policy(tmp_path), analyst="a", schema=schema) as conn:
        cur = conn.cursor()
        cur.execute("SELECT state, COUNT(*) FROM t GROUP BY state")
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"ALTER TABLE {schema}.t ALTER COLUMN state TYPE text COLLATE public.ci")
        _refused(conn, "SELECT state, COUNT(*) FROM t GROUP BY state")


# ------------------------------------------------------------------------------------------- Spark

def test_spark_string_collations_count_as_inexact():
    """Spark 3.5 (installed here) has no collations: its strings compare by their bytes. Spark 4's
    StringType carries one; anything but UTF8_BINARY makes the column inexact. (A plain object
    with the attribute stands for Spark 4's type: no Spark 4 to run here.)"""
    from dpsql.engines.spark import _collated

    class StringType:
        def __init__(self, collation):
            self.collation = collation
    assert not _collated(StringType("UTF8_BINARY"))
    assert _collated(StringType("UTF8_LCASE")) and _collated(StringType("UNICODE_CI"))
    assert not _collated(object())
