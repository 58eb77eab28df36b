"""What an analyst reads for free does not depend on the rows (dpsql.filetypes argues it).

Each test reads the catalog as an analyst would (the DB-API, the shell's \\d and DESCRIBE, EXPLAIN DP,
refusals, and `dpsql serve` through psycopg and psql) from files that differ only in one person's
value, and asserts the answers are identical; with types guessed from the values they would not be.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psycopg
import pytest
from click.testing import CliRunner

import dpsql
from dpsql import errors
from dpsql.engines import open_engine
from dpsql.frontends.cli import cli
from dpsql.frontends.commands import describe_result, tables_result
from dpsql.policy import load_policy
from dpsql.session import Session

N = 60
HEADER = "person_id,state,income,born,secret"


def _row(i: int) -> list[str]:
    return [str(i), ["CA", "NY", "TX"][i % 3], str(30000 + 1000 * i), f"19{50 + i % 40}-0{1 + i % 9}-1{i % 10}",
            f"s{i}"]


# One person's (person 7's) row as written in each variant: a fraction, text, nothing, a date in
# another format, and a first field starting with '#' (which DuckDB's sniffer takes for a comment).
VARIANTS = {
    "base": {},
    "fraction": {2: "52000.5"},
    "text": {2: "N/A"},
    "empty": {2: ""},
    "date": {3: "01/02/1980"},
    "hash": {0: "#7"},
}
SNIFFED_DIFFER = ("fraction", "text", "date")     # the variants whose guessed types differ from base's

POLICY = """\
[budget]
epsilon = 100
delta = 1e-6
ledger = "ledger.sqlite"
accountant = "basic"
[timing]
quantum = 0
floor = 0
[server]
auth = "trust"
[tables.people]
privacy_unit = "person_id"
[tables.people.columns]
state = { values = ["CA", "NY", "TX"] }
income = { lower = 0, upper = 200000 }
born = { lower = 1900-01-01, upper = 2000-12-31 }
"""
TYPES = """\
[tables.people.types]
person_id = "BIGINT"
state = "VARCHAR"
income = "BIGINT"
born = "DATE"
"""


def write_variant(directory: Path, name: str) -> Path:
    """people.csv of N people, person 7's row changed as VARIANTS[name] says; a policy beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [HEADER]
    for i in range(1, N + 1):
        row = _row(i)
        if i == 7:
            for k, v in VARIANTS[name].items():
                row[k] = v
        lines.append(",".join(row))
    (directory / "people.csv").write_text("\n".join(lines) + "\n")
    (directory / "policy.toml").write_text(POLICY + TYPES)
    (directory / "untyped.toml").write_text(POLICY)
    return directory


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("variants")
    return {name: write_variant(root / name, name) for name in VARIANTS}


# The statements an analyst may try for free: catalog reads, statistics, plans, type errors.
PROBES = [
    "SELECT SUM(state) FROM people",                     # a refusal that names a type
    "SELECT AVG(income || 'x') FROM people",
    "SELECT * FROM people",
    "SELECT COUNT(secret) FROM people",                  # a column of the file the policy does not type
    "SELECT estimated_size FROM duckdb_tables()",
    "SELECT * FROM duckdb_columns()",
    "SELECT column_name, data_type FROM information_schema.columns",
    "SELECT reltuples FROM pg_catalog.pg_class",
    "SELECT * FROM pg_stats",
    "SELECT * FROM pg_stat_user_tables",
    "EXPLAIN SELECT COUNT(*) FROM people",
    "EXPLAIN ANALYZE SELECT COUNT(*) FROM people",
    "EXPLAIN (FORMAT JSON) SELECT * FROM people",
    "PRAGMA table_info('people')",
    "DESCRIBE people",
    "SUMMARIZE people",
    "SELECT * FROM read_json('people.json')",
    "SELECT * FROM read_csv_auto('people.csv')",
]
PRIVATE = [
    "SELECT state, SUM(income) AS s, AVG(income) AS a, COUNT(*) AS n FROM people GROUP BY state",
    "SELECT EXTRACT(YEAR FROM born) AS y, COUNT(*) AS n FROM people GROUP BY 1",
    "SELECT MEDIAN(income) AS m, SUM(income) / 2 AS h FROM people",
]


def analyst_view(directory: Path) -> dict:
    """Everything the DB-API and the shell show an analyst without a charge, plus the description
    of some private answers (their values are noisy; their names and types must not be)."""
    os.chdir(directory)
    conn = dpsql.connect("people.csv", policy="policy.toml", analyst="alice")
    try:
        session: Session = conn.session
        ran: list[str] = []
        real_run = session.engine.run

        def recording_run(sql, *args, **kwargs):
            ran.append(sql)
            return real_run(sql, *args, **kwargs)

        session.engine.run = recording_run
        cur = conn.cursor()
        view: dict = {"tables": session.tables(), "dt": tables_result(session).rows,
                      "describe": describe_result(session, "people").rows}
        for sql in ["EXPLAIN DP " + PRIVATE[0], "EXPLAIN DP (SQL) " + PRIVATE[2]]:
            cur.execute(sql)
            view[sql] = (cur.description, cur.fetchall())
        for sql in PROBES:
            with pytest.raises(errors.Error) as info:
                cur.execute(sql)
            view[sql] = (type(info.value).__name__, str(info.value))
        assert not ran, f"an analyst's catalog probe reached the engine: {ran}"
        for sql in PRIVATE:
            cur.execute(sql)
            view[sql] = (cur.description, len(cur.fetchall()) if "GROUP BY state" in sql else None)
        return view
    finally:
        conn.close()


def test_guessed_types_would_depend_on_one_persons_value(variants):
    """Why the types must be declared: DuckDB's guess from the values moves with person 7's row."""
    guessed = {}
    for name, d in variants.items():
        engine = open_engine(str(d / "people.csv"))
        try:
            guessed[name] = engine.table_columns("people")
            assert engine.guessed == {"people"}
        finally:
            engine.close()
    for name in SNIFFED_DIFFER:
        assert guessed[name] != guessed["base"], name
    assert guessed["base"]["income"] == "BIGINT" and guessed["text"]["income"] == "VARCHAR"


def test_the_analysts_view_is_the_same_whatever_one_person_wrote(variants, monkeypatch):
    monkeypatch.chdir(variants["base"])
    base = analyst_view(variants["base"])
    assert base["tables"] == {"people": {"person_id": "BIGINT", "state": "VARCHAR", "income": "BIGINT",
                                         "born": "DATE"}}
    for name, d in variants.items():
        if name != "base":
            view = analyst_view(d)
            for key in base:
                assert view[key] == base[key], (name, key)


def test_a_value_that_does_not_read_as_its_type_is_null_and_its_row_stays(variants):
    for name, d in variants.items():
        engine = open_engine(str(d / "people.csv"), types=load_policy(d / "policy.toml").file_types())
        try:
            assert engine.guessed == frozenset()
            assert engine.run("SELECT COUNT(*) FROM people").rows == [(N,)]       # no row lost, '#7' included
            row = engine.run("SELECT person_id, income, born FROM people ORDER BY person_id NULLS FIRST LIMIT 1"
                             if name == "hash" else "SELECT person_id, income, born FROM people WHERE person_id = 7"
                             ).rows[0]
            expected = {"hash": (None, 37000), "fraction": (7, 52001), "text": (7, None), "empty": (7, None)}
            if name in expected:
                assert row[:2] == expected[name]
            assert (row[2] is None) == (name == "date")
        finally:
            engine.close()


def test_columns_the_policy_does_not_type_are_not_loaded(variants):
    d = variants["base"]
    engine = open_engine(str(d / "people.csv"), types=load_policy(d / "policy.toml").file_types())
    try:
        assert list(engine.table_columns("people")) == ["person_id", "state", "income", "born"]
    finally:
        engine.close()


def test_a_policy_without_types_for_a_file_is_refused_at_load(variants, monkeypatch):
    d = variants["base"]
    monkeypatch.chdir(d)
    with pytest.raises(errors.PolicyError, match=r"tables\.people: .*without declared column types.*"
                                                 r"\[tables\.people\.types\].*dpsql init") as info:
        dpsql.connect("people.csv", policy="untyped.toml", analyst="alice")
    assert "line" in str(info.value)
    res = CliRunner().invoke(cli, ["policy", "check", "untyped.toml", "--database", "people.csv"])
    assert res.exit_code == 1 and "tables.people.types" in res.output, res.output
    res = CliRunner().invoke(cli, ["policy", "check", "policy.toml", "--database", "people.csv"])
    assert res.exit_code == 0 and "OK" in res.output, res.output


def test_a_declared_column_the_file_lacks_and_bad_types(variants, tmp_path):
    d = variants["base"]
    with pytest.raises(errors.InterfaceError, match="has no column 'nope', which the policy declares"):
        open_engine(str(d / "people.csv"), types={"people": (("person_id", "BIGINT"), ("nope", "BIGINT"))})
    base = {"budget": {"epsilon": 1, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite")}}
    for types, problem in (({"person_id": "INTEGER[]"}, "types.person_id: must be a type name"),
                           ({"person_id": 3}, "types.person_id: must be a type name"),
                           ({}, "types: declares no column"),
                           ({"a": "BIGINT", "A": "BIGINT"}, "declared twice")):
        with pytest.raises(errors.PolicyError, match=problem):
            load_policy({**base, "tables": {"people": {"privacy_unit": "person_id", "types": types}}})
    pol = load_policy({**base, "tables": {"people": {"privacy_unit": "person_id", "types": {
        "person_id": "int8", "income": "numeric(10, 2)", "born": "timestamptz", "note": "text"}}}})
    assert pol.tables["people"].types == (("person_id", "BIGINT"), ("income", "DECIMAL(10,2)"),
                                          ("born", "TIMESTAMP WITH TIME ZONE"), ("note", "VARCHAR"))


def test_a_public_table_from_a_file_takes_its_types_from_the_policy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("regions.csv").write_text("state,population,name\nCA,39000000,California\nNY,unknown,New York\n")
    text = POLICY.split("[tables.people]")[0] + '[public]\ntables = ["regions"]\n'
    Path("p.toml").write_text(text)
    with pytest.raises(errors.PolicyError, match=r"public table 'regions' .*\[public\.types\.regions\]"):
        dpsql.connect("regions.csv", policy="p.toml", analyst="alice")
    Path("p.toml").write_text(text + '[public.types.regions]\nstate = "VARCHAR"\npopulation = "BIGINT"\n')
    with dpsql.connect("regions.csv", policy="p.toml", analyst="alice") as conn:
        assert conn.session.tables() == {"regions": {"state": "VARCHAR", "population": "BIGINT"}}
        cur = conn.cursor()
        cur.execute("SELECT state, population FROM regions ORDER BY state")
        assert cur.fetchall() == [("CA", 39000000), ("NY", None)]


def test_policy_check_says_when_declared_types_are_not_used(variants, tmp_path):
    """On a database table the database's own types apply: `dpsql policy check` says the types are unused."""
    db = str(tmp_path / "people.duckdb")
    con = duckdb.connect(db)
    con.execute(f"CREATE TABLE people AS FROM read_csv('{variants['base'] / 'people.csv'}')")
    con.close()
    shutil.copy(variants["base"] / "policy.toml", tmp_path / "policy.toml")
    res = CliRunner().invoke(cli, ["policy", "check", str(tmp_path / "policy.toml"), "--database", db])
    assert res.exit_code == 0 and "tables.people.types: not used" in res.output, res.output


def _parquet_dir(root: Path, odd: str | None) -> Path:
    """One Parquet file per person (a per-person layout); with `odd`, person 7's file was written
    with income as that type."""
    root.mkdir(parents=True)
    con = duckdb.connect()
    for i in range(1, 13):
        income = f"{30000 + i}::BIGINT" if i != 7 or odd is None else \
            {"DOUBLE": "52000.5::DOUBLE", "VARCHAR": "'N/A'"}[odd]
        con.execute(f"COPY (SELECT {i}::BIGINT AS person_id, {income} AS income) TO '{root / f'p{i:02}.parquet'}' "
                    "(FORMAT parquet)")
    con.close()
    return root


def test_parquet_types_come_from_the_policy_not_from_one_persons_file(tmp_path):
    dirs = {odd: _parquet_dir(tmp_path / str(odd).lower(), odd) for odd in (None, "DOUBLE", "VARCHAR")}
    guessed = {}
    for odd, d in dirs.items():
        engine = open_engine(str(d / "*.parquet"))
        try:
            guessed[odd] = engine.table_columns(d.name)["income"]
        finally:
            engine.close()
    assert guessed == {None: "BIGINT", "DOUBLE": "DOUBLE", "VARCHAR": "VARCHAR"}     # one file decides
    seen = []
    for odd, d in dirs.items():
        types = {d.name: (("person_id", "BIGINT"), ("income", "BIGINT"))}
        engine = open_engine(str(d / "*.parquet"), types=types)
        try:
            seen.append(engine.facts([d.name])[d.name].columns)
            assert engine.run("SELECT COUNT(*), COUNT(income) FROM " + d.name).rows == [(12, 12 - (odd == "VARCHAR"))]
        finally:
            engine.close()
    assert seen == [(("person_id", "BIGINT"), ("income", "BIGINT"))] * 3


def test_init_writes_every_columns_type_read_from_all_the_rows(tmp_path, monkeypatch):
    """DuckDB guesses from a sample; init checks every value, and writes VARCHAR where one does not read."""
    monkeypatch.chdir(tmp_path)
    rows = [f"{i},{i % 50},{i * 2}" for i in range(30000)] + ["30000,N/A,60000"]
    Path("big.csv").write_text("person_id,score,other\n" + "\n".join(rows) + "\n")
    res = CliRunner().invoke(cli, ["init", "big.csv"])
    assert res.exit_code == 0, res.output
    text = Path("big.toml").read_text()
    assert '[tables.big.types]\n' in text
    assert 'person_id = "BIGINT"\nscore = "VARCHAR"\nother = "BIGINT"\n' in text
    assert "N/A" not in text and "30000" not in text
    text = text.replace('# privacy_unit = "person_id"', 'privacy_unit = "person_id"')
    Path("big.toml").write_text(text)
    res = CliRunner().invoke(cli, ["policy", "check", "big.toml", "--database", "big.csv"])
    assert res.exit_code == 0 and "OK" in res.output, res.output


def test_postgresql_statistics_never_reach_the_engine(people_pg, tmp_path):
    from tests.conftest import policy_for
    conn = dpsql.connect(people_pg, policy=policy_for(tmp_path), analyst="alice")
    try:
        ran: list[str] = []
        real_run = conn.session.engine.run
        conn.session.engine.run = lambda sql, *a, **k: (ran.append(sql), real_run(sql, *a, **k))[1]
        cur = conn.cursor()
        for sql in ("SELECT reltuples, relpages FROM pg_class", "SELECT reltuples FROM pg_catalog.pg_class",
                    "SELECT * FROM pg_stats WHERE tablename = 'people'", "SELECT n_live_tup FROM pg_stat_user_tables",
                    "SELECT * FROM pg_catalog.pg_statistic", "SELECT pg_table_size('people')",
                    "EXPLAIN SELECT COUNT(*) FROM people", "EXPLAIN ANALYZE SELECT COUNT(*) FROM people",
                    "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM people", "ANALYZE people"):
            with pytest.raises(errors.Error):
                cur.execute(sql)
        assert not ran, ran
    finally:
        conn.close()


# -- through `dpsql serve`: psycopg and psql

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(directory: Path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", "people.csv",
                             "--policy", "policy.toml", "--listen", f"127.0.0.1:{port}"], cwd=directory,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    line = ""
    while "dpsql serving" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
    assert "dpsql serving" in line, proc.stderr.read() if proc.poll() is not None else line
    return proc, port


CATALOG = [
    "SELECT column_name, data_type, ordinal_position, is_nullable FROM information_schema.columns "
    "WHERE table_name = 'people' ORDER BY ordinal_position",
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attlen FROM "
    "pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid WHERE c.relname = 'people' "
    "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
    "SELECT relname, reltuples, relpages, relallvisible, relkind, relnatts FROM pg_catalog.pg_class "
    "WHERE relname = 'people'",
    "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'public'",
]
REFUSED = ["SELECT * FROM pg_stats WHERE tablename = 'people'", "SELECT n_live_tup FROM pg_stat_user_tables",
           "SELECT * FROM pg_catalog.pg_statistic", "EXPLAIN SELECT COUNT(*) FROM people",
           "EXPLAIN ANALYZE SELECT COUNT(*) FROM people", "SELECT SUM(state) FROM people",
           "SELECT estimated_size FROM duckdb_tables()", "SELECT COUNT(secret) FROM people"]
PSQL_COMMANDS = ["\\d people", "\\d+ people", "\\dt+", "\\d"]


def proxy_view(directory: Path) -> dict:
    proc, port = _serve(directory)
    try:
        view: dict = {}
        with psycopg.connect(f"host=127.0.0.1 port={port} user=alice dbname=people sslmode=disable",
                             autocommit=True) as c:
            for sql in CATALOG:
                cur = c.execute(sql)
                view[sql] = ([(d.name, d.type_code) for d in cur.description], cur.fetchall())
            for sql in REFUSED:
                with pytest.raises(psycopg.Error) as info:
                    c.execute(sql)
                view[sql] = (info.value.sqlstate, str(info.value))
            for sql in PRIVATE:
                cur = c.execute(sql)
                view[sql] = [(d.name, d.type_code) for d in cur.description]
        psql = shutil.which("psql")
        if psql is not None:
            for command in PSQL_COMMANDS:
                r = subprocess.run([psql, "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "alice", "-d", "people",
                                    "-c", command], capture_output=True, text=True, timeout=60,
                                   env={**os.environ, "PGSSLMODE": "disable"})
                view[command] = (r.returncode, r.stdout, r.stderr)
        return view
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_proxy_catalog_is_the_same_whatever_one_person_wrote(variants):
    base = proxy_view(variants["base"])
    assert base[CATALOG[0]][1] == [("person_id", "bigint", 1, "YES"), ("state", "character varying", 2, "YES"),
                                   ("income", "bigint", 3, "YES"), ("born", "date", 4, "YES")]
    assert base[CATALOG[2]][1][0][1:4] == (-1.0, 0, 0)          # no row count, no pages
    if shutil.which("psql") is not None:
        code, out, _ = base["\\d people"]
        assert code == 0 and "income" in out and "secret" not in out
    for name in ("text", "hash"):
        view = proxy_view(variants[name])
        for key in base:
            assert view[key] == base[key], (name, key)
