"""The PostgreSQL engine: parameters, lockdown, errors, cancel, catalog."""
from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

import dpsql
from dpsql.engines import open_engine
from dpsql.engines.postgres import PostgresEngine, _bind, _bound
from dpsql.errors import EngineError, InterfaceError, QueryCanceled, QueryRejected

# -- parameters: no database needed

@pytest.mark.parametrize("sql, want", [
    ("SELECT %(salt)s", "SELECT %(salt)s"),
    ("SELECT 7 % 2, %(salt)s", "SELECT 7 %% 2, %(salt)s"),
    ("WHERE k LIKE '%a%' ORDER BY h(%(salt)s)", "WHERE k LIKE '%%a%%' ORDER BY h(%(salt)s)"),
    ("SELECT '%(salt)s', %(salt)s", "SELECT '%%(salt)s', %(salt)s"),             # text stays text
    ("SELECT 'it''s %(salt)s' || %(salt)s", "SELECT 'it''s %%(salt)s' || %(salt)s"),
    ("SELECT E'\\'%(salt)s', %(salt)s", "SELECT E'\\'%%(salt)s', %(salt)s"),
    ('SELECT "%(salt)s", %(salt)s', 'SELECT "%%(salt)s", %(salt)s'),
    ("SELECT $q$ %(salt)s $q$, %(salt)s", "SELECT $q$ %%(salt)s $q$, %(salt)s"),
    ("SELECT 1 -- %(salt)s\n, %(salt)s /* %(salt)s */", "SELECT 1 -- %%(salt)s\n, %(salt)s /* %%(salt)s */"),
    ("SELECT %(other)s, %s", "SELECT %%(other)s, %%s"),                             # not a parameter
])
def test_bind_escapes_every_percent_but_the_parameters(sql, want):
    assert _bind(sql, {"salt": 1}) == want
    assert _bound(sql, frozenset({"salt"})) == want == _bound(sql, frozenset({"salt"}))     # kept, the same


# -- on the server

@pytest.fixture(scope="module")
def pg(people_pg) -> str:
    """people_pg plus a schema `eng` with catalog edge cases (dropped afterwards)."""
    with psycopg.connect(people_pg, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS eng CASCADE")
        admin.execute("CREATE SCHEMA eng")
        admin.execute("CREATE TABLE eng.parent (id bigint PRIMARY KEY, v int)")
        admin.execute("CREATE TABLE eng.child () INHERITS (eng.parent)")
        admin.execute("CREATE TABLE eng.uq (a int UNIQUE, b int NOT NULL, c int, d int, UNIQUE (c, d))")
        admin.execute("CREATE TABLE eng.part (id bigint PRIMARY KEY, v int) PARTITION BY RANGE (id)")
        admin.execute("CREATE TABLE eng.part_1 PARTITION OF eng.part FOR VALUES FROM (0) TO (100)")
        admin.execute("CREATE MATERIALIZED VIEW eng.mv AS SELECT 1 AS x")
        admin.execute("CREATE VIEW eng.v AS SELECT * FROM eng.uq")
        admin.execute('CREATE TABLE eng."Mixed" (x int)')
    yield people_pg
    with psycopg.connect(people_pg, autocommit=True) as admin:
        admin.execute("DROP SCHEMA IF EXISTS eng CASCADE")


@pytest.fixture
def engine(pg):
    e = PostgresEngine(pg, statement_timeout=20)
    yield e
    e.close()


def test_types_are_names_analysis_understands(engine):
    from dpsql.analysis.analyze import family
    rows = engine.run("SELECT 1::int2 a, 2::int4 b, 3::int8 c, 1.5::numeric(4,1) d, 1::float4 e, 1::float8 f, "
                      "'x'::text g, 'y'::varchar h, 'z'::char(2) i, true j, DATE '2024-01-02' k, "
                      "TIMESTAMP '2024-01-02 03:04' l, now() m, ARRAY[1] n")
    fams = [family(t) for t in rows.types]
    assert fams == ["int"] * 3 + ["decimal"] + ["float"] * 2 + ["text"] * 3 + ["bool", "date"] + \
        ["timestamp"] * 2 + ["other"]
    cols = engine.table_columns("people")
    assert [family(t) for t in cols.values()] == ["int", "int", "float", "text", "text", "text"]


def test_like_pattern_with_the_salt(engine):
    sql = ("SELECT kind, COUNT(*) FROM visits WHERE kind LIKE '%ec%' AND hashtextextended(kind, %(salt)s) "
           "IS NOT NULL GROUP BY kind ORDER BY kind")
    got = engine.run(sql, {"salt": 2**62 + 5}).rows
    assert [r[0] for r in got] == ["checkup", "specialist"]
    assert engine.run("SELECT COUNT(*) FROM visits WHERE kind LIKE '%ec%'").rows[0][0] == sum(r[1] for r in got)


def test_like_filter_with_a_salt_end_to_end(pg, policy):
    """A salted (group-choice) private query whose WHERE has % patterns runs and is near the truth."""
    with dpsql.connect(pg, policy=policy, analyst="alice") as conn:
        plan = conn.session.plan("SELECT state, COUNT(*) FROM visits WHERE kind LIKE '%a%' GROUP BY state")
        assert plan.group_choice
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 5")
        cur.execute("SELECT state, COUNT(*) FROM visits WHERE kind LIKE '%a%' AND kind NOT LIKE '%z%' "
                    "GROUP BY state")
        rows = dict(cur.fetchall())
        assert len(rows) == 8 and rows["CA"] > 100


def test_every_query_is_read_only_and_settings_do_not_stick(engine):
    for bad in ["CREATE TABLE zz (a int)", "INSERT INTO regions VALUES ('ZZ', 'x')", "DROP TABLE regions",
                "SELECT nextval('no_such_seq')", "SET TRANSACTION READ WRITE",
                "SELECT 1; COMMIT; SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE; CREATE TABLE zz (a int)",
                "WITH d AS (DELETE FROM regions RETURNING *) SELECT COUNT(*) FROM d",
                "COPY regions TO PROGRAM 'true'"]:
        with pytest.raises(EngineError):
            engine.run(bad)
    engine.run("SELECT set_config('search_path', 'pg_catalog', false), "
               "set_config('statement_timeout', '0', false), set_config('default_transaction_read_only', 'off', false)")
    settings = engine.run("SELECT current_setting('search_path'), current_setting('statement_timeout'), "
                          "current_setting('default_transaction_read_only'), current_setting('transaction_read_only')")
    assert settings.rows == [('"public", pg_temp', "20s", "on", "on")]
    assert len(engine.run("SELECT * FROM regions").rows) == 3
    assert "zz" not in engine.base_tables()


def test_engine_errors_never_quote_data(engine, caplog):
    with caplog.at_level(logging.WARNING, logger="dpsql.engine"):
        with pytest.raises(EngineError) as info:
            engine.run("SELECT CAST(state AS INT) FROM people")
    assert "CA" not in str(info.value) and "details are in the server log" in str(info.value)
    assert any("invalid input syntax" in r.getMessage() for r in caplog.records)
    assert engine.run("SELECT 1").rows == [(1,)]        # usable after an error


def test_interrupt_and_timeout(pg, engine):
    threading.Timer(0.3, engine.interrupt).start()
    started = time.monotonic()
    with pytest.raises(QueryCanceled, match="cancelled"):
        engine.run("SELECT pg_sleep(10)")
    assert time.monotonic() - started < 5
    assert engine.run("SELECT 2").rows == [(2,)]
    quick = PostgresEngine(pg, statement_timeout=0.2)
    try:
        with pytest.raises(QueryCanceled, match="statement timeout") as info:
            quick.run("SELECT pg_sleep(5)")
        assert info.value.sqlstate == "57014"      # as PostgreSQL's own statement_timeout
    finally:
        quick.close()


def test_catalog(pg):
    e = PostgresEngine(pg, schema="eng")
    try:
        assert e.base_tables() == {"parent", "child", "uq", "part", "mixed"}
        assert e.views() == {"mv", "v"}
        assert e.unique_columns("parent") == set()          # a child's rows escape the parent's key
        assert e.unique_columns("child") == set()
        assert e.unique_columns("part") == {"id"}            # a partitioned table's key covers all partitions
        assert e.unique_columns("uq") == {"a"}               # (c, d) is not a single column
        assert e.not_null_columns("uq") == {"b"}
        assert e.unique_columns("public.people_pk") == {"person_id"}
        assert e.table_columns("public.regions") == {"state": "text", "region": "text"}
        assert list(e.table_columns("v")) == ["a", "b", "c", "d"]
        with pytest.raises(KeyError):
            e.table_columns("people")                        # not in this engine's schema
    finally:
        e.close()
    e = PostgresEngine(pg)
    try:
        assert e.base_tables() == {"people", "people_pk", "visits", "regions"}
        assert e.views() == {"people_view"}
        assert e.unique_columns("people") == set() and e.not_null_columns("people") == {"person_id"}
    finally:
        e.close()


def test_temp_tables_never_shadow_real_ones(pg):
    con = psycopg.connect(pg, autocommit=True)
    try:
        con.execute("CREATE TEMP TABLE regions (state text, region text)")
        e = open_engine(con)
        assert e.run("SELECT COUNT(*) FROM regions").rows == [(3,)]
        assert "regions" in e.base_tables()
        e.close()
        assert not con.closed           # a connection passed in is not the engine's to close
        assert con.execute("SELECT COUNT(*) FROM regions").fetchone() == (0,)
    finally:
        con.close()


def test_connection_object_and_urls(pg, people_pg, policy):
    con = psycopg.connect(pg)
    try:
        with dpsql.connect(con, policy=policy, analyst="erin") as c:
            cur = c.cursor()
            cur.execute("SELECT COUNT(*) FROM people")
            assert cur.fetchone()[0] > 0
        assert not con.closed and con.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert con.execute("SELECT 1").fetchone() == (1,)
        con.rollback()
        engine = open_engine(con)
        clone = engine.clone()                  # a connection of its own, on the same database
        assert clone.run("SELECT COUNT(*) FROM regions").rows == [(3,)]
        clone.close()
        engine.close()
        assert not con.closed
    finally:
        con.close()
    short = "postgres://" + people_pg.split("://", 1)[1]
    e = open_engine(short)
    assert isinstance(e, PostgresEngine) and e.dialect == "postgres"
    e.close()


def test_unreachable_server_is_an_interface_error_without_the_password():
    with pytest.raises(InterfaceError) as info:
        PostgresEngine("postgresql://x:sekrit@127.0.0.1:1/db", connect_timeout=2)
    assert "sekrit" not in str(info.value) and "127.0.0.1:1/db" in str(info.value)


@pytest.mark.parametrize("expr", ["f / 3", "f / -(4)", "ABS(f) / 3", "f * 2 / 3", "(r + 0) / 3", "ROUND(CAST(f AS numeric), 2) / 7",
                                  "ROUND(f) / 7", "n * 1 / 3"])
def test_division_of_tiny_values_cannot_fail_on_postgres(pg, expr, tmp_path):
    """PostgreSQL's float8 division raises "value out of range: underflow" (5e-324 / 3): one row
    would decide success or error. Expressions divide in NUMERIC, with a plain `/` (sqlglot's
    untyped division would wrap the numerator in CAST(... AS DOUBLE PRECISION))."""
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS tiny")
        admin.execute("CREATE TABLE tiny (pid bigint, f float8, r real, n numeric)")
        admin.execute("INSERT INTO tiny SELECT g, CASE WHEN g % 2 = 0 THEN 5e-324 ELSE -2.2250738585072014e-308 END, "
                      "CASE WHEN g % 2 = 0 THEN 1e-45 ELSE -1.2e-38 END, 1e-300 FROM generate_series(1, 40) g")
    policy = {"budget": {"epsilon": 100.0, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite")},
              "defaults": {"epsilon": 1.0, "mechanism": "laplace"}, "timing": {"quantum": 0, "floor": 0},
              "tables": {"tiny": {"privacy_unit": "pid", "max_rows_per_unit": 1, "max_groups_per_unit": 1,
                                  "columns": {"f": {"lower": -1, "upper": 1}, "r": {"lower": -1, "upper": 1},
                                              "n": {"lower": -1, "upper": 1}}}}}
    try:
        with dpsql.connect(pg, policy=policy, analyst="alice") as conn:
            from dpsql.rewrite import to_sql
            assert "DOUBLE PRECISION) /" not in to_sql(conn.session.plan(f"SELECT SUM({expr}) FROM tiny"), "postgres")
            cur = conn.cursor()
            for sql in (f"SELECT SUM({expr}), AVG({expr}) FROM tiny", f"SELECT VAR_POP({expr}) FROM tiny"):
                cur.execute(sql)
                assert len(cur.fetchall()) == 1
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS tiny")


# -- narrow sums: BIGINT where the bounds prove it fits, NUMERIC where they do not

@pytest.mark.parametrize("upper, rows, narrow", [(1000, 3, True), (10**15, 10_000, False)])
def test_sums_are_bigint_only_where_the_bounds_prove_it_fits(pg, tmp_path, upper, rows, narrow):
    """EngineDialect.narrow_sums: each unit's clamped contribution, and the centered per-row terms of
    AVG, go out as BIGINT when every value they can take fits int8; when rows x upper passes int8's
    limit they stay NUMERIC. Either way the released totals are the exact bounded sums: one person
    holds 500 rows of int8's largest value, one only NULLs."""
    data = [(g % 50, g) for g in range(1, 101)] + [(999, 2**63 - 1)] * 500 + [(998, None)] * 2
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS wide")
        admin.execute("CREATE TABLE wide (pid bigint, v bigint)")
        with admin.cursor().copy("COPY wide (pid, v) FROM STDIN") as cp:
            for r in data:
                cp.write_row(r)
    policy = {"budget": {"epsilon": 1e9, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite"), "accountant": "basic"},
              "defaults": {"epsilon": 1.0, "mechanism": "laplace"}, "timing": {"quantum": 0, "floor": 0},
              "reconstruction": {"cache_lifetime": 0},
              "tables": {"wide": {"privacy_unit": "pid", "max_rows_per_unit": rows, "max_groups_per_unit": 1,
                                  "columns": {"v": {"lower": 0, "upper": upper}}}}}
    per: dict[int, list] = {}
    for pid, v in data:
        per.setdefault(pid, []).append(v)
    truth_sum = sum(min(sum(min(v, upper) for v in vs if v is not None), rows * upper) for vs in per.values())
    truth_count = sum(min(sum(v is not None for v in vs), rows) for vs in per.values())
    try:
        with dpsql.connect(pg, policy=policy, analyst="alice") as conn:
            from dpsql.rewrite import to_sql
            sql = to_sql(conn.session.plan("SELECT SUM(v), AVG(v) FROM wide"), "postgres")
            assert ("AS BIGINT)) AS _v0" in sql) == narrow, sql
            cur = conn.cursor()
            cur.execute("SET dpsql.epsilon = 1000000")
            cur.execute("SELECT SUM(v) AS s, COUNT(v) AS c, AVG(v) AS a FROM wide")
            (s, c, a), = cur.fetchall()
            # noise: Laplace scales of about rows x upper / 1e5 (s) and rows / 1e5 (c)
            assert s == pytest.approx(truth_sum, abs=rows * upper * 1e-3)
            assert c == pytest.approx(truth_count, abs=rows * 1e-3 + 1)
            assert a == pytest.approx(truth_sum / truth_count, rel=0.01)
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS wide")


def _plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_per_unit_rows_are_aggregated_without_a_spilling_hash(pg, tmp_path):
    """EngineDialect.sorted_per_unit: with one unit per row, 50,000 units and PostgreSQL's default
    work_mem (4MB), the planner would build the per-unit rows with a HashAggregate that spills to
    disk in batches (as it did at 1M people, 25% slower). Asked for in unit order, they come from
    a Sort and a streaming GroupAggregate; with few units and many rows each, the rows are still
    hashed and only the few per-unit rows sorted. EXPLAIN ANALYZE of dpsql's own SQL says which."""
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS pu_many, pu_few")
        admin.execute("CREATE TABLE pu_many AS SELECT i::bigint AS pid, (i % 100)::bigint AS v "
                      "FROM generate_series(1, 50000) i")
        admin.execute("CREATE TABLE pu_few AS SELECT (i % 30)::bigint AS pid, (i % 100)::bigint AS v "
                      "FROM generate_series(1, 50000) i")
        admin.execute("ANALYZE pu_many")
        admin.execute("ANALYZE pu_few")
    tables = {t: {"privacy_unit": "pid", "max_rows_per_unit": 2000, "columns": {"v": {"lower": 0, "upper": 100}}}
              for t in ("pu_many", "pu_few")}
    policy = {"budget": {"epsilon": 1e9, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite")},
              "defaults": {"epsilon": 1.0}, "timing": {"quantum": 0, "floor": 0}, "tables": tables}
    from dpsql.rewrite import to_sql
    try:
        with dpsql.connect(pg, policy=policy, analyst="alice") as conn, \
                psycopg.connect(pg, autocommit=True) as raw:
            raw.execute("SET work_mem = '4MB'")
            raw.execute("SET jit = off")
            for table, units in (("pu_many", 50000), ("pu_few", 30)):
                for query in (f"SELECT SUM(v) FROM {table}", f"SELECT AVG(v) FROM {table}"):
                    sql = to_sql(conn.session.plan(query), "postgres")
                    plan = raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql).fetchone()[0][0]["Plan"]
                    nodes = list(_plan_nodes(plan))
                    spilled = [n for n in nodes if n.get("Strategy") == "Hashed" and n.get("HashAgg Batches", 1) > 1]
                    assert not spilled, (query, nodes)
                    sorted_rows = max((n["Actual Rows"] for n in nodes if n["Node Type"] == "Sort"), default=0)
                    assert sorted_rows <= units, (query, nodes)      # few units: only the per-unit rows
                    if units > 1000:
                        assert any(n.get("Strategy") == "Sorted" for n in nodes), (query, nodes)
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS pu_many, pu_few")


def test_the_transaction_and_its_locks_end_with_the_query(pg, engine):
    """After a query the connection is idle and the transaction's ACCESS SHARE locks are gone (DDL
    is not held up), after a failed query as after a good one."""
    from psycopg.pq import TransactionStatus
    expect = engine.facts(["people"])
    for sql, fails in [("SELECT COUNT(*) FROM people", False), ("SELECT CAST(state AS INT) FROM people", True)]:
        if fails:
            with pytest.raises(EngineError):
                engine.run(sql, expect=expect)
        else:
            assert engine.run(sql, expect=expect).rows[0][0] > 0
        assert engine._con.info.transaction_status == TransactionStatus.IDLE
        with psycopg.connect(pg) as other:
            other.execute("SET lock_timeout = '2s'")
            other.execute("LOCK TABLE people IN ACCESS EXCLUSIVE MODE")     # raises if a lock were left
            other.rollback()
    assert engine.run("SELECT 3").rows == [(3,)]


def test_prepared_facts_see_every_change_and_stay_on_dpsql_own_connections(pg):
    """The facts query of a relation set is prepared once on a connection dpsql opened (no parameters:
    one generic plan, reused); run many times, it still sees a change committed before the query's
    LOCK. A connection passed in by its owner is left without prepared statements."""
    from dpsql.errors import SchemaChanged
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS eng.drift")
        admin.execute("CREATE TABLE eng.drift (id bigint PRIMARY KEY, v int NOT NULL)")
    own = PostgresEngine(pg)
    try:
        facts = own.facts(["eng.drift"])
        assert facts["eng.drift"].unique == {"id"} and facts["eng.drift"].not_null == {"id", "v"}
        called = []
        for _ in range(8):                       # custom plans first, then the generic one
            assert own.run("SELECT COUNT(*) FROM eng.drift", expect=facts, before=lambda: called.append(1)).rows
        prepared = own._con.execute("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
                                    "WHERE name LIKE 'dpsql%'").fetchall()
        assert prepared == [("dpsql_facts_0", 8, 0)]          # planned once, reused
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute("ALTER TABLE eng.drift ALTER COLUMN v DROP NOT NULL")
        with pytest.raises(SchemaChanged):
            own.run("SELECT COUNT(*) FROM eng.drift", expect=facts, before=lambda: called.append(2))
        assert called == [1] * 8
    finally:
        own.close()
    with psycopg.connect(pg, autocommit=True) as theirs:
        e = PostgresEngine(theirs)
        assert e.run("SELECT COUNT(*) FROM people", expect=e.facts(["people"])).rows[0][0] > 0
        assert theirs.execute("SELECT COUNT(*) FROM pg_prepared_statements").fetchone()[0] == 0


def test_prepared_facts_are_bounded(pg):
    """When the engine forgets its composed texts (256 relation sets), it deallocates their statements."""
    e = PostgresEngine(pg)
    try:
        names = lambda: sorted(r[0] for r in e._con.execute("SELECT name FROM pg_prepared_statements "   # noqa: E731
                                                             "WHERE name LIKE 'dpsql%'").fetchall())
        people, uq = e.facts(["people"]), e.facts(["eng.uq"])
        e.run("SELECT COUNT(*) FROM people", expect=people)
        assert names() == ["dpsql_facts_0"]
        e._begin_texts.update({("dummy", i): "" for i in range(255)})
        e.run("SELECT COUNT(*) FROM eng.uq", expect=uq)                  # the 257th: all forgotten first
        assert names() == ["dpsql_facts_0"] and len(e._begin_texts) == 1
        assert e.run("SELECT COUNT(*) FROM people", expect=people).rows[0][0] > 0
        assert names() == ["dpsql_facts_0", "dpsql_facts_1"]
    finally:
        e.close()


def test_a_server_older_than_14_is_refused_with_its_version(postgres_server, monkeypatch):
    """The group choice's hash needs hash_record_extended (PostgreSQL 14): an older server is
    refused when dpsql connects, naming the version, not at the first grouped query."""
    import dpsql.engines.postgres as pg
    from dpsql.errors import InterfaceError
    monkeypatch.setattr(pg, "MIN_SERVER_VERSION", 10**8)        # this server is "too old"
    with pytest.raises(InterfaceError, match=r"PostgreSQL 14 or later; .* runs \d+\.\d+") as err:
        pg.PostgresEngine(postgres_server)
    assert "upgrade" in err.value.hint


# -- collations: two explicit ones in one expression would fail only when rows meet

_COLLATED = [
    ("SELECT COALESCE(a, b) AS g, COUNT(*) FROM coll GROUP BY COALESCE(a, b)", "a", "b"),
    ("SELECT CASE WHEN x > 0 THEN a ELSE b END AS g, COUNT(*) FROM coll GROUP BY 1", "a", "b"),
    ("SELECT COUNT(*) FROM coll WHERE a = b", "a", "b"),
    ("SELECT SUM(x) FILTER (WHERE a = b) FROM coll", "a", "b"),
    ("SELECT COUNT(*) FROM coll JOIN labels ON coll.a = labels.label", "a", "label"),
]


@pytest.mark.parametrize("rows", [0, 300])
def test_two_explicit_collations_in_one_expression_are_refused_whatever_the_rows(pg, tmp_path, rows):
    """PostgreSQL raises "could not determine which collation to use" for text of two implicit
    collations only when rows reach the sort, hash or comparison: on the table with rows the
    query would fail and on the empty one succeed. dpsql reads each column's collation with its
    type and refuses such a query before anything runs, with or without rows. One collation per
    expression, or the database's default beside one, runs."""
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS coll, labels")
        admin.execute('CREATE TABLE coll (uid int, a text COLLATE "C", b text COLLATE "POSIX", c text, x int)')
        admin.execute("INSERT INTO coll SELECT g %% 100, chr(97 + g %% 4), chr(97 + g %% 5), chr(97 + g %% 3), g %% 2 "
                      "FROM generate_series(1, %s) g", [rows])
        admin.execute('CREATE TABLE labels (label text COLLATE "POSIX")')
        admin.execute("INSERT INTO labels VALUES ('a'), ('b')")
    policy = {"budget": {"epsilon": 100.0, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite"), "accountant": "basic"},
              "defaults": {"epsilon": 1.0}, "timing": {"quantum": 0, "floor": 0},
              "public": {"tables": ["labels"]},
              "tables": {"coll": {"privacy_unit": "uid", "max_rows_per_unit": 5, "max_groups_per_unit": 2,
                                  "columns": {"a": {"values": list("abcd")}, "b": {"values": list("abcde")},
                                              "c": {"values": list("abc")}, "x": {"lower": 0, "upper": 1}}}}}
    try:
        with dpsql.connect(pg, policy=policy, analyst="alice") as conn:
            types = conn.session.engine.table_columns("coll")
            assert types["a"] == 'text COLLATE "C"' and types["b"] == 'text COLLATE "POSIX"' and types["c"] == "text"
            cur = conn.cursor()
            for sql, one, other in _COLLATED:
                with pytest.raises(QueryRejected, match="collation") as err:
                    cur.execute(sql)
                assert f"'{one}'" in str(err.value) and f"'{other}'" in str(err.value), sql
            for sql in ("SELECT a, b, COUNT(*) FROM coll GROUP BY a, b",          # separate expressions
                        "SELECT COALESCE(a, c) AS g, COUNT(*) FROM coll GROUP BY COALESCE(a, c)",
                        "SELECT COUNT(*) FROM coll WHERE a = c AND x = 1",
                        "SELECT c, COUNT(*) FROM coll WHERE b <> c GROUP BY c"):
                cur.execute(sql)
                assert cur.fetchall(), sql
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS coll, labels")
