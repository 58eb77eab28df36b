"""Shared fixtures: a small DuckDB database with people/visits and a policy for it, and the
same data in PostgreSQL (one database per test session, dropped at the end) and in Spark
(Parquet files written by DuckDB, external tables in one local SparkSession for the whole
test session).

Engine-parametrized tests take `target` (a DuckDB path, a PostgreSQL URL or a spark:// URL
holding the same tables) or `conn` (a dpsql connection on it). PostgreSQL: the server at
$DPSQL_TEST_POSTGRES (default postgresql://postgres@127.0.0.1:5432/test); when it is
unreachable its tests skip, or fail when CI=true. Spark (marker `spark`): pyspark and Java;
when they are missing its tests skip, or fail when CI=true.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

ENGINES = ["duckdb", "postgres", pytest.param("spark", marks=pytest.mark.spark)]
SPARK_MASTER = "local[2]"
SPARK_TARGET = "spark://" + SPARK_MASTER
POSTGRES_DSN = os.environ.get("DPSQL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/* from the current output")


# ------------------------------------------------------------------ parallel runs (pytest-xdist)
#
# The README's test command runs the suite in worker processes (`-n auto --dist loadgroup`). Each
# worker runs the session fixtures of its own, so what they name must be the process's own
# (pg_name below; files under tmp_path_factory are per worker already). Two kinds of tests are
# scheduled with care, for any test file, including ones added later:
#   * Spark (marker `spark`, or using the spark_session fixture): group "spark", so they all run
#     on one worker and only one SparkSession (a JVM of 1 GiB) is started;
#   * timing measurements (marker `timing`, or `alone`): group "timing", and each runs alone:
#     the other workers wait until it is done (a busy neighbour on a 2-core machine is what the
#     side-channel tests would measure).

SPARK_GROUP, TIMING_GROUP = "spark", "timing"


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("xdist"):       # pytest -p no:xdist, or xdist not installed
        config.addinivalue_line("markers", "xdist_group(name): the pytest-xdist worker group (tests/conftest.py)")
    # `-n N` alone means --dist load, which ignores the groups: this suite needs them
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("dpsql_groups"):
        config.pluginmanager.register(_GroupIds(), "dpsql-xdist-group-ids")


@pytest.hookimpl(optionalhook=True)   # an xdist hook: the controller, once per worker it starts
def pytest_configure_node(node):
    node.workerinput["dpsql_groups"] = node.config.option.dist == "loadgroup"


def _uses_spark(item) -> bool:
    return item.get_closest_marker("spark") is not None or "spark_session" in getattr(item, "fixturenames", ())


def _group(item) -> str | None:
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
    return "_".join(names) or None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _uses_spark(item):
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))
        elif item.get_closest_marker("timing") is not None or item.get_closest_marker("alone") is not None:
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
        if item.get_closest_marker("timing") is not None:
            item.add_marker(pytest.mark.alone)


class _GroupIds:
    """The xdist_group of each test in its node id (`id@group`), as `--dist loadgroup` schedules
    by. xdist does this itself by setting the old string field of the node id, which pytest 9.2's
    structured ids no longer read: its grouping silently stops (pytest-dev/pytest-xdist#1386).
    Runs in xdist workers, after xdist's own hook; a no-op where xdist's suffix took effect."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        for item in items:
            group = _group(item)
            if group is None or item.nodeid.endswith("@" + group):
                continue
            grouped = f"{item.nodeid}@{group}"
            if hasattr(item, "_id"):                  # pytest >= 9.2
                from _pytest.nodeid import NodeId
                item._id = NodeId.parse(grouped)
            else:
                item._nodeid = grouped


class _RunLock:
    """A readers-writer lock shared by the workers of one parallel run (flock on two files in
    the run's base temporary directory): every test holds it shared, an `alone` test exclusive.
    The gate makes an exclusive waiter block new shared holders, so it is not starved. A run of
    `alone` tests on one worker keeps it exclusive from the first to the last (they are one
    xdist group, so consecutive): the others do not wait again before each."""

    def __init__(self, directory: Path):
        import fcntl
        self._flock = fcntl.flock
        self._sh, self._ex, self._un = fcntl.LOCK_SH, fcntl.LOCK_EX, fcntl.LOCK_UN
        directory.mkdir(parents=True, exist_ok=True)
        self._gate = open(directory / "dpsql-tests.gate", "a")
        self._rw = open(directory / "dpsql-tests.lock", "a")
        self._exclusive = False           # held exclusive since an earlier test

    def acquire(self, exclusive: bool) -> None:
        if self._exclusive:
            if exclusive:
                return
            self.release()
        self._flock(self._gate, self._ex)
        try:
            self._flock(self._rw, self._ex if exclusive else self._sh)
        finally:
            if not exclusive:
                self._flock(self._gate, self._un)
        self._exclusive = exclusive

    def release(self) -> None:
        self._flock(self._rw, self._un)
        if self._exclusive:
            self._flock(self._gate, self._un)
        self._exclusive = False


def _run_lock(config) -> _RunLock | None:
    """The run's lock in an xdist worker (None elsewhere, or without fcntl: nothing to wait for)."""
    if not hasattr(config, "workerinput"):
        return None
    if not hasattr(config, "_dpsql_run_lock"):
        try:
            # workers' base temporary directories are .../pytest-N/popen-gwK: the parent is the run's
            config._dpsql_run_lock = _RunLock(config._tmp_path_factory.getbasetemp().parent)
        except ImportError:
            config._dpsql_run_lock = None
    return config._dpsql_run_lock


_running: dict = {}     # "item": the test whose setup, call or teardown runs now


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of each test (fixtures of any scope included) under the run's lock."""
    _running["item"] = item
    lock = _run_lock(item.config)
    if lock is None:
        return (yield)
    lock.acquire(exclusive=item.get_closest_marker("alone") is not None)
    try:
        return (yield)
    finally:
        if not (lock._exclusive and nextitem is not None and nextitem.get_closest_marker("alone") is not None):
            lock.release()


@pytest.fixture(scope="session")
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


def make_people_db(path: str, people: int = 2000, *, pk: bool = True) -> str:
    """A small deterministic database: people (and people_pk), visits, and a public table."""
    from dpsql.datagen import generate
    con = duckdb.connect(path)
    generate(con, people, seed=0, primary_key_copy=pk)
    con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('CA', 'West'), ('NY', 'East'), "
                "('TX', 'South')) t(state, region)")
    con.execute("CREATE VIEW people_view AS SELECT * FROM people")
    con.close()
    return path


def policy_for(tmp_path, **overrides) -> dict:
    from dpsql.datagen import demo_policy
    # Basic composition: most tests check exact sums of epsilons. zCDP accounting (the policy's
    # default) is tested in tests/ledger/test_accounting.py and tests/integration/test_zcdp.py.
    pol = demo_policy(ledger=str(tmp_path / "ledger.sqlite"), accountant="basic")
    pol["budget"]["epsilon"] = overrides.pop("epsilon", 100.0)
    pk = dict(pol["tables"]["people"])
    pk["columns"] = dict(pk["columns"])
    pol["tables"]["people_pk"] = pk
    pol["public"] = {"tables": ["regions"]}
    # Release timing is tested on its own (tests/integration/test_limits.py, tests/attacks/test_timing.py);
    # elsewhere its floor would only make every query take 0.1 s.
    pol["timing"] = {"quantum": 0, "floor": 0}
    for k, v in overrides.items():
        pol[k] = v
    return pol


@pytest.fixture(scope="session")
def people_db(tmp_path_factory) -> str:
    return make_people_db(str(tmp_path_factory.mktemp("db") / "people.duckdb"))


@pytest.fixture
def policy(tmp_path) -> dict:
    return policy_for(tmp_path)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The test server's URL; skip when it is unreachable (fail when CI=true)."""
    import psycopg
    try:
        psycopg.connect(POSTGRES_DSN, connect_timeout=5).close()
    except psycopg.Error as err:
        why = f"PostgreSQL test server unreachable at $DPSQL_TEST_POSTGRES ({_safe_dsn(POSTGRES_DSN)}): {err}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return POSTGRES_DSN


def _with_dbname(url: str, name: str) -> str:
    """The same postgresql:// URL with another database."""
    from urllib.parse import urlsplit, urlunsplit
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("$DPSQL_TEST_POSTGRES must be a postgresql:// URL")
    return urlunsplit(parts._replace(path="/" + name))


def _safe_dsn(dsn: str) -> str:
    import psycopg
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    p.pop("password", None)
    return psycopg.conninfo.make_conninfo(**p)


def pg_name(prefix: str) -> str:
    """A PostgreSQL name of this test process's own: `prefix` and the process id. Several test
    processes share the server (the workers of a parallel run, other checkouts' runs), and each
    runs its session fixtures once, so a fixed name would be created and dropped under another."""
    name = f"{prefix}_{os.getpid()}"
    if len(name.encode()) > 63:           # PostgreSQL would truncate it silently
        raise ValueError(f"PostgreSQL name too long: {name}")
    return name


@contextlib.contextmanager
def postgres_database(server: str, name: str):
    """A fresh database on the server named pg_name(name) (`name` and this process's id),
    dropped (connections and all) afterwards; yields its URL."""
    import psycopg
    from psycopg import sql
    name = pg_name(name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_dbname(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


_PG_TYPES = {"DOUBLE": "double precision", "FLOAT": "real", "HUGEINT": "numeric", "UBIGINT": "numeric",
             "UINTEGER": "bigint", "USMALLINT": "integer", "UTINYINT": "smallint", "TINYINT": "smallint",
             "VARCHAR": "text", "BLOB": "bytea"}


def _open_source(duckdb_path: str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a database file, or to a copy of it: a dpsql engine still open
    on the file in this process (another test of this worker, its module-scoped fixture) holds it
    with its own configuration, and DuckDB refuses a second configuration of one file."""
    try:
        return duckdb.connect(duckdb_path, read_only=True)
    except duckdb.ConnectionException:
        copy = Path(tempfile.mkdtemp(prefix="dpsql_src_")) / Path(duckdb_path).name
        shutil.copy(duckdb_path, copy)
        return duckdb.connect(str(copy), read_only=True)


def copy_to_postgres(duckdb_path: str, dsn: str, *, schema: str = "public") -> None:
    """Copy a DuckDB database's base tables (types, NOT NULL, single-column PRIMARY KEY and
    UNIQUE) and views into a PostgreSQL schema, rows by COPY."""
    import psycopg
    from psycopg import sql
    src = _open_source(duckdb_path)
    try:
        tables = [r[0] for r in src.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                            "ORDER BY table_name").fetchall()]
        with psycopg.connect(dsn) as pg:
            pg.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            pg.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            for t in tables:
                cols = src.execute("SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
                                   "WHERE table_name = ? AND schema_name = 'main' ORDER BY column_index",
                                   [t]).fetchall()
                keys = src.execute("SELECT constraint_type, constraint_column_names FROM duckdb_constraints() "
                                   "WHERE table_name = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
                                   [t]).fetchall()
                defs = [sql.SQL("{} {}{}").format(sql.Identifier(c), sql.SQL(_PG_TYPES.get(ty, ty)),
                                                  sql.SQL("" if nullable else " NOT NULL"))
                        for c, ty, nullable in cols]
                defs += [sql.SQL("{} ({})").format(sql.SQL(kind), sql.SQL(", ").join(map(sql.Identifier, names)))
                         for kind, names in keys]
                pg.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(t), sql.SQL(", ").join(defs)))
                names = sql.SQL(", ").join(sql.Identifier(c) for c, _, _ in cols)
                with pg.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(t), names)) as cp:
                    for row in src.execute(f'SELECT * FROM "{t}"').fetchall():
                        cp.write_row(row)
                pg.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(t)))
            for (view_sql,) in src.execute("SELECT sql FROM duckdb_views() WHERE NOT internal "
                                           "AND schema_name = 'main'").fetchall():
                pg.execute(view_sql.rstrip().rstrip(";"))
    finally:
        src.close()


@pytest.fixture(scope="session")
def people_pg(postgres_server, people_db) -> str:
    """The people_db tables in a PostgreSQL database of their own (one per test session)."""
    with postgres_database(postgres_server, "dpsql_test") as dsn:
        copy_to_postgres(people_db, dsn)
        yield dsn


def export_parquet(duckdb_path: str, directory: Path) -> dict[str, str]:
    """Each base table of a DuckDB database as one Parquet file (DuckDB's COPY): {table: path}."""
    directory.mkdir(parents=True, exist_ok=True)
    src = _open_source(duckdb_path)
    try:
        tables = [r[0] for r in src.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                            "ORDER BY table_name").fetchall()]
        out = {}
        for t in tables:
            out[t] = str(directory / f"{t}.parquet")
            src.execute(f"COPY \"{t}\" TO '{out[t]}' (FORMAT parquet)")
        return out
    finally:
        src.close()


@pytest.fixture(scope="session")
def spark_session(request, tmp_path_factory):
    """The one local SparkSession of the test session (engines on spark://local[2] reuse its
    SparkContext); skip when pyspark or Java is missing (fail when CI=true)."""
    item = _running.get("item")
    if hasattr(request.config, "workerinput") and item is not None and not item.nodeid.endswith("@" + SPARK_GROUP):
        pytest.fail(f"{item.nodeid} would start a second SparkSession (JVM) in a parallel run: it is not scheduled "
                    f"in the xdist group {SPARK_GROUP!r}. Mark the test spark (it requests spark_session through "
                    "request.getfixturevalue?) and run with --dist loadgroup.")
    try:
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master(SPARK_MASTER).appName("dpsql-tests")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.default.parallelism", "2")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
                 .config("spark.driver.memory", "1g").getOrCreate())
    except Exception as err:     # ImportError, or Java missing (pyspark raises its own errors)
        why = f"Spark unavailable: {type(err).__name__}: {err}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


def file_types(path: str) -> dict[str, str]:
    """A Parquet or CSV file's column types as a policy declares them ([tables.T.types]), read by
    the owner's reading `dpsql init` uses (dpsql.engines.duckdb.file_columns)."""
    from dpsql.engines.duckdb import file_columns
    from dpsql.filetypes import file_type
    return {name: file_type(typ) for name, typ in file_columns(path) if file_type(typ) is not None}


def register_parquet(spark, tables: dict[str, str], database: str = "default") -> None:
    """Parquet files as external catalog tables (shared by every session of the SparkContext)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    for name, path in tables.items():
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{database}`.`{name}` USING parquet LOCATION '{path}'")


@pytest.fixture(scope="session")
def people_parquet(people_db, tmp_path_factory) -> dict[str, str]:
    """The people_db tables as Parquet files (read only): {table: path}."""
    return export_parquet(people_db, tmp_path_factory.mktemp("parquet"))


@pytest.fixture(scope="session")
def people_spark(spark_session, people_parquet) -> str:
    """The people_db tables (and people_view) as Parquet-backed tables in the test SparkSession;
    a spark:// URL to them. No PRIMARY KEY or NOT NULL in Spark: people_pk is bounded like people."""
    register_parquet(spark_session, people_parquet)
    spark_session.sql("CREATE VIEW IF NOT EXISTS people_view AS SELECT * FROM people")
    return SPARK_TARGET


@pytest.fixture(params=ENGINES)
def target(request, people_db) -> str:
    """people_db on each engine: a DuckDB path, a PostgreSQL URL or a spark:// URL with the same tables."""
    if request.param == "postgres":
        return request.getfixturevalue("people_pg")
    if request.param == "spark":
        return request.getfixturevalue("people_spark")
    return people_db


@pytest.fixture
def conn(target, policy):
    import dpsql
    c = dpsql.connect(target, policy=policy, analyst="alice")
    yield c
    c.close()


@contextlib.contextmanager
def benchmark_script(name: str):
    """Import benchmarks/<name>.py as a module (registered under its name while in use,
    since dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
