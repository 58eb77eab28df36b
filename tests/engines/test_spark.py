"""The Spark engine: Parquet sources, lockdown, catalog, types, errors, clones and cancel."""
from __future__ import annotations

import threading
import time

import pytest

import dpsql
from dpsql.engines import open_engine
from dpsql.engines.spark import SparkEngine, is_path, master_of
from dpsql.errors import EngineError, InterfaceError, QueryCanceled, QueryRejected
from tests.conftest import file_types, policy_for

pytestmark = pytest.mark.spark


@pytest.fixture
def engine(people_spark):
    e = open_engine(people_spark)
    yield e
    e.close()


def test_master_urls():
    assert master_of("spark://local[*]") == "local[*]"
    assert master_of("spark://local") == "local"
    assert master_of("spark://10.0.0.5:7077") == "spark://10.0.0.5:7077"
    assert master_of("spark://m1:7077,m2:7077") == "spark://m1:7077,m2:7077"
    assert master_of("spark://yarn") == "yarn"
    for bad in ("spark://", "spark://x", "spark://host:port"):
        with pytest.raises(InterfaceError):
            master_of(bad)
    assert is_path("/data/people.parquet") and is_path("people.parquet") and is_path("s3a://b/people")
    assert not is_path("people") and not is_path("db.people")


def test_another_master_in_the_same_process_is_refused(people_spark, policy):
    with pytest.raises(InterfaceError, match="one SparkContext"):
        dpsql.connect("spark://127.0.0.1:1", policy=policy, analyst="a")


def test_catalog_and_types(engine):
    assert {"people", "people_pk", "visits", "regions"} <= engine.base_tables()
    assert "people_view" in engine.views() and "people_view" not in engine.base_tables()
    cols = engine.table_columns("visits")
    assert cols == {"visit_id": "BIGINT", "person_id": "BIGINT", "visit_date": "DATE", "state": "VARCHAR",
                    "cost": "DOUBLE", "kind": "VARCHAR"}
    assert engine.table_columns("people")["age"] == "INTEGER"
    assert engine.unique_columns("people_pk") == set() and engine.not_null_columns("people") == set()
    with pytest.raises(KeyError):
        engine.table_columns("nope")
    rows = engine.run("SELECT CAST(1 AS DECIMAL(38, 0)) AS d, xxhash64(1, :salt) AS h", {"salt": 2**63 - 1})
    assert rows.columns == ("d", "h") and rows.types == ("DECIMAL(38,0)", "BIGINT")


@pytest.mark.parametrize("sql", [
    "DROP TABLE people", "CREATE TABLE x AS SELECT 1", "INSERT INTO people SELECT * FROM people",
    "WITH a AS (SELECT * FROM people) INSERT INTO people SELECT * FROM a", "SET spark.sql.ansi.enabled=true",
    "CACHE TABLE people", "SELECT 1; DROP TABLE people", "SELECT * FROM parquet.`/etc`",
])
def test_only_single_queries_run(engine, sql):
    with pytest.raises(EngineError):
        engine.run(sql)
    assert "people" in engine.base_tables()


def test_errors_are_generic_and_logged(engine, caplog):
    with pytest.raises(EngineError, match="details are in the server log") as err:
        engine.run("SELECT assert_true(state = 'secret-value') FROM people")
    assert "secret" not in str(err.value)
    assert any(r.name == "dpsql.engine" for r in caplog.records)


def test_parquet_sources_through_the_policy(people_spark, people_parquet, tmp_path):
    """source = a Parquet path: registered as a temporary view, read by the rewrite; the analyst
    can reach it only by the policy's table name."""
    pol = policy_for(tmp_path)
    for name in ("people", "visits"):
        pol["tables"][name] = dict(pol["tables"][name], source=people_parquet[name],
                                   types=file_types(people_parquet[name]))
    pol["tables"]["sick"] = dict(pol["tables"].pop("people_pk"), source=people_parquet["people"],
                                 types=file_types(people_parquet["people"]))
    with dpsql.connect(people_spark, policy=pol, analyst="alice") as c:
        session = c.session
        assert people_parquet["people"] not in session.engine.base_tables()
        assert people_parquet["people"] not in session.engine.views()
        cur = c.cursor()
        cur.execute("SELECT state, SUM(cost) FROM visits GROUP BY state")
        assert len(cur.fetchall()) == 8
        cur.execute("SELECT COUNT(*) FROM sick")
        assert 1500 < cur.fetchone()[0] < 2500
        path = people_parquet["people"]
        for sneaky in (f"SELECT * FROM `{path}`", f"SELECT * FROM parquet.`{path}`"):
            with pytest.raises(QueryRejected):
                cur.execute(sneaky)


def test_clones_share_sources_and_interrupt_only_their_own_query(people_spark, people_parquet):
    a = SparkEngine(people_spark)
    a.table_columns(people_parquet["visits"])
    b = a.clone()
    # hours of work on two cores: it cannot finish before the interrupt, however slow b's query is
    slow = "SELECT COUNT(*) FROM range(0, 4000000000000) WHERE xxhash64(id) % 7 = 3"
    out: dict = {}

    def run(e, name, sql):
        try:
            out[name] = e.run(sql).rows
        except (EngineError, QueryCanceled) as err:
            out[name] = err

    try:
        ta = threading.Thread(target=run, args=(a, "a", slow))
        ta.start()
        time.sleep(3)
        tb = threading.Thread(target=run, args=(b, "b", f"SELECT COUNT(*) FROM `{people_parquet['visits']}`"))
        tb.start()
        b.interrupt()              # nothing of b's is cancelled but its own (maybe finished) query
        time.sleep(1)
        assert ta.is_alive()       # b's interrupt left a's query running
        a.interrupt()              # (b's query may wait behind a's job for the executors until now)
        ta.join(60)
        tb.join(60)
        assert isinstance(out["a"], QueryCanceled) and "cancelled" in str(out["a"])
        assert b.run(f"SELECT COUNT(*) FROM `{people_parquet['visits']}`").rows[0][0] > 0
        assert a.run("SELECT 1").rows == [(1,)]
    finally:
        b.close()
        a.close()
    assert not a._spark.sparkContext._jsc.sc().isStopped()    # the test session's context is not ours to stop


def test_parquet_sources_take_their_types_from_the_policy(people_spark, tmp_path):
    """A path source is read with the policy's types (try_cast: a value that does not read is NULL),
    whatever type one person's file has; a source without declared types is refused at load
    (dpsql.filetypes)."""
    import duckdb
    for odd in ("bigint", "text"):
        d = tmp_path / odd
        d.mkdir()
        con = duckdb.connect()
        for i in range(1, 5):
            income = "'N/A'" if odd == "text" and i == 3 else f"{30000 + i}::BIGINT"
            con.execute(f"COPY (SELECT {i}::BIGINT AS person_id, {income} AS income, 'x' AS secret) "
                        f"TO '{d / f'p{i}.parquet'}' (FORMAT parquet)")
        con.close()
    seen = []
    for odd in ("bigint", "text"):
        source = str(tmp_path / odd / "p3.parquet")       # one person's file
        types = {source: (("person_id", "BIGINT"), ("income", "BIGINT"))}
        engine = open_engine(people_spark, types=types)
        try:
            seen.append(engine.table_columns(source))
            assert engine.run(f"SELECT person_id, income FROM `{source}`").rows == \
                [(3, None if odd == "text" else 30003)]
            assert engine.guessed == frozenset() and engine.files == {source}
        finally:
            engine.close()
    assert seen == [{"person_id": "BIGINT", "income": "BIGINT"}] * 2
    pol = policy_for(tmp_path)
    pol["tables"]["people"] = dict(pol["tables"]["people"], source=str(tmp_path / "text" / "p3.parquet"))
    with pytest.raises(dpsql.PolicyError, match=r"tables\.people: .*without declared column types"):
        dpsql.connect(people_spark, policy=pol, analyst="alice")
