"""CSV and Parquet files as targets and as policy sources (DuckDB reads them once, at connect)."""
from __future__ import annotations

import json

import duckdb
import pytest
from click.testing import CliRunner

from dpsql import errors
from dpsql.engines import open_engine
from dpsql.engines.duckdb import file_table_name
from dpsql.frontends.cli import cli

POLICY = """\
[budget]
epsilon = 10
delta = 1e-6
[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 1
{source}
[tables.people.columns.age]
lower = 0
upper = 100
[tables.people.columns.state]
values = ["CA", "NY", "TX"]
[tables.people.types]
person_id = "BIGINT"
age = "INTEGER"
state = "VARCHAR"
"""


@pytest.fixture
def files(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE p AS SELECT i AS person_id, 18 + i % 70 AS age, ['CA', 'NY', 'TX'][1 + i % 3] AS state "
                "FROM range(3000) t(i)")
    con.execute(f"COPY p TO '{tmp_path / 'people.csv'}' (HEADER)")
    (tmp_path / "parts").mkdir()
    con.execute(f"COPY (FROM p WHERE person_id < 1500) TO '{tmp_path / 'parts' / 'a.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (FROM p WHERE person_id >= 1500) TO '{tmp_path / 'parts' / 'b.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY p TO '{tmp_path / 'people.parquet'}' (FORMAT parquet)")
    con.close()
    return tmp_path


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    return CliRunner()


@pytest.mark.parametrize("name", ["people.csv", "people.parquet"])
def test_a_file_is_a_target_named_by_its_stem(runner, files, name):
    pol = files / "p.toml"
    pol.write_text(POLICY.format(source=""))
    res = runner.invoke(cli, ["query", str(files / name), "SELECT state, COUNT(*) AS n FROM people GROUP BY state",
                              "--policy", str(pol), "--analyst", "alice", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert sorted(r["state"] for r in doc["rows"]) == ["CA", "NY", "TX"]
    assert all(abs(r["n"] - 1000) < 200 for r in doc["rows"])


def test_policy_source_glob_on_duckdb(runner, files):
    pol = files / "p.toml"
    pol.write_text(POLICY.format(source='source = "parts/*.parquet"'))     # relative to the policy's directory
    res = runner.invoke(cli, ["query", ":memory:", "SELECT COUNT(*) AS n FROM people", "--policy", str(pol),
                              "--analyst", "alice", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert abs(json.loads(res.stdout)["rows"][0]["n"] - 3000) < 200
    res = runner.invoke(cli, ["policy", "check", str(pol), "--database", ":memory:"])
    assert res.exit_code == 0 and "OK" in res.output, res.output


def test_files_have_no_keys_and_the_engine_reads_no_file_after_connect(files):
    engine = open_engine(str(files / "people.csv"), sources={"parts/*.parquet": str(files / "parts" / "*.parquet")})
    try:
        facts = engine.facts(["people", "parts/*.parquet"])
        for f in facts.values():              # nothing assumed unique or non-NULL: a file has no constraints
            assert f.kind == "table" and f.unique == frozenset() and f.not_null == frozenset()
        assert dict(facts["people"].columns)["person_id"] == "BIGINT"     # no declared types: DuckDB's guess,
        assert engine.guessed == {"people", "parts/*.parquet"}             # which no policy may show an analyst
        assert engine.base_tables() == {"people"}              # the loaded sources are not public tables
        for sql in (f"SELECT * FROM read_csv_auto('{files / 'people.csv'}')", "SET enable_external_access = true",
                    f"SELECT COUNT(*) FROM '{files / 'people.parquet'}'"):
            with pytest.raises(errors.Error):
                engine.run(sql)
        clone = engine.clone()                                  # the proxy's per-client connections see them
        assert clone.run('SELECT COUNT(*) FROM dpsql_files.main."parts/*.parquet"').rows == [(1500 * 2,)]
        clone.close()
    finally:
        engine.close()


def test_missing_or_unreadable_file(files):
    with pytest.raises(errors.InterfaceError, match="no such file"):
        open_engine(str(files / "nope.csv"))
    (files / "bad.parquet").write_text("not parquet")
    with pytest.raises(errors.InterfaceError, match="cannot read") as info:
        open_engine(str(files / "bad.parquet"))
    assert "not parquet" not in str(info.value)


def test_file_table_name():
    assert file_table_name("/x/people.csv") == "people"
    assert file_table_name("My-Data.CSV") == "my_data"
    assert file_table_name("2024.parquet") == "_2024"
    assert file_table_name("visits.csv.gz") == "visits"
    assert file_table_name("data/visits/*.parquet") == "visits"


def test_a_glob_is_a_target_named_by_its_directory(runner, files):
    pol = files / "p.toml"
    pol.write_text(POLICY.format(source="").replace("tables.people", "tables.parts"))
    res = runner.invoke(cli, ["query", str(files / "parts" / "*.parquet"), "SELECT COUNT(*) AS n FROM parts",
                              "--policy", str(pol), "--analyst", "alice", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert abs(json.loads(res.stdout)["rows"][0]["n"] - 3000) < 200


@pytest.mark.parametrize("name", ["people.csv", "people.parquet"])
def test_init_writes_a_starter_policy_of_names_and_types_only(runner, files, name, monkeypatch):
    monkeypatch.chdir(files)
    res = runner.invoke(cli, ["init", name])
    assert res.exit_code == 0, res.output
    text = (files / "people.toml").read_text()
    for col, typ in (("person_id", "BIGINT"), ("age", "BIGINT"), ("state", "VARCHAR")):
        assert f'# privacy_unit = "{col}"' in text and f"# {col} = {{}}" in text and typ in text
    assert "No value of the data was read" in text and "[budget]" in text
    for value in ("'CA'", '"CA"', "NY", "2999", "87"):      # no value of the data: not a key, not a min or max
        assert value not in text
    # not valid until a unit is chosen; policy check says which key and line
    res = runner.invoke(cli, ["policy", "check", "people.toml", "--database", name])
    assert res.exit_code == 1 and "privacy_unit" in res.output and "line" in res.output
    # refuses to overwrite
    res = runner.invoke(cli, ["init", name])
    assert res.exit_code == 1 and "--force" in res.output
    assert runner.invoke(cli, ["init", name, "--force"]).exit_code == 0
    # uncomment the unit (and a column): valid against the file, and a query runs
    text = (files / "people.toml").read_text().replace('# privacy_unit = "person_id"', 'privacy_unit = "person_id"')
    (files / "people.toml").write_text(text.replace("# age = {}", "age = {}"))
    res = runner.invoke(cli, ["policy", "check", "people.toml", "--database", name])
    assert res.exit_code == 0 and "OK" in res.output, res.output
    res = runner.invoke(cli, ["query", name, "SELECT COUNT(*) AS n FROM people WHERE age > 30", "-p", "people.toml",
                              "-a", "alice", "--format", "json"])
    assert res.exit_code == 0, res.output


def test_init_refuses_other_files(runner, files, monkeypatch):
    monkeypatch.chdir(files)
    res = runner.invoke(cli, ["init", "people.duckdb", "--table", "people"])
    assert res.exit_code == 1 and "no DuckDB database" in res.output and not (files / "people.duckdb").exists()
    res = runner.invoke(cli, ["init", "people.csv", "--table", "people"])
    assert res.exit_code == 2 and "--table is for databases" in res.output
    (files / "notes.txt").write_text("not a database\n")
    res = runner.invoke(cli, ["init", "notes.txt", "--table", "t"])
    assert res.exit_code == 1 and "notes.txt" in res.output and "Traceback" not in res.output


def test_init_from_a_duckdb_database_names_the_tables_and_reads_no_value(runner, files, monkeypatch):
    import duckdb
    monkeypatch.chdir(files)
    con = duckdb.connect("db.duckdb")
    con.execute("CREATE TABLE people AS SELECT 1::BIGINT AS person_id, 87 AS age, 'CA' AS state")
    con.execute("CREATE TABLE visits AS SELECT 1::BIGINT AS person_id, DATE '2999-01-02' AS day, 12.5 AS cost")
    con.close()
    res = runner.invoke(cli, ["init", "db.duckdb"])
    assert res.exit_code == 1 and "--table" in res.output
    res = runner.invoke(cli, ["init", "db.duckdb", "--table", "nosuch"])
    assert res.exit_code == 1 and "no table 'nosuch'" in res.output
    res = runner.invoke(cli, ["init", "db.duckdb", "-t", "people", "-t", "visits"])
    assert res.exit_code == 0, res.output
    text = (files / "policy.toml").read_text()
    assert "[tables.people]" in text and "[tables.visits]" in text and "source =" not in text
    assert "# cost = {}" in text and "# day = {}" in text and "public bounds" in text
    for value in ("87", "CA", "2999", "12.5"):
        assert value not in text
    # one unit per table uncommented: a valid policy, and a join query runs
    text = text.replace('# privacy_unit = "person_id"', 'privacy_unit = "person_id"').replace("# age = {}", "age = {}")
    (files / "policy.toml").write_text(text)
    res = runner.invoke(cli, ["policy", "check", "policy.toml", "--database", "db.duckdb"])
    assert res.exit_code == 0 and "OK" in res.output, res.output


def test_init_from_postgresql(runner, tmp_path, monkeypatch, people_pg):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(cli, ["init", people_pg, "--table", "people", "--output", "pg.toml"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "pg.toml").read_text()
    assert '# privacy_unit = "person_id"' in text and "# income = {}" in text and "public bounds" in text
