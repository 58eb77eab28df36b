"""The `dpsql` command (click's runner) on the demo and on a user's database."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpsql.frontends.cli import cli
from dpsql.frontends.render import format_value


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    return CliRunner()


def test_query_on_demo_prints_noisy_table(runner):
    res = runner.invoke(cli, ["query", "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split("|")[0].strip() == "sex" and "±" in lines[2]
    assert "(2 rows)" in res.stdout
    assert "remaining epsilon 9.5" in res.stderr


def test_query_json_and_csv(runner):
    res = runner.invoke(cli, ["query", "SELECT COUNT(*) AS n FROM people", "--format", "json", "-e", "1"])
    doc = json.loads(res.stdout)
    assert doc["columns"] == ["n"] and doc["epsilon_charged"] == 1.0
    assert abs(doc["rows"][0]["n"] - 20000) < 100 and doc["rows"][0]["n_ci95"] > 0
    res = runner.invoke(cli, ["query", "SELECT state, COUNT(*) FROM people GROUP BY state", "--format", "csv"])
    rows = res.stdout.splitlines()
    assert rows[0] == "state,count" and len(rows) == 9


def test_refusal_is_one_clear_line_and_exit_1(runner):
    res = runner.invoke(cli, ["query", "SELECT * FROM people"])
    assert res.exit_code == 1
    assert "SELECT * is not allowed" in res.output and "[42501]" in res.output
    assert "Traceback" not in res.output


def test_target_needs_policy_and_analyst(runner, people_db):
    res = runner.invoke(cli, ["query", people_db, "SELECT COUNT(*) FROM people"])
    assert res.exit_code == 2 and "--policy" in res.output


def test_query_on_own_database(runner, people_db, tmp_path):
    from dpsql.demo import policy_toml
    from tests.conftest import policy_for
    pol = tmp_path / "p.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)))
    res = runner.invoke(cli, ["query", people_db, "SELECT COUNT(*) AS n FROM people", "--policy", str(pol),
                              "--analyst", "zoe"])
    assert res.exit_code == 0, res.output
    assert "(1 row)" in res.stdout


def test_demo_command_and_help(runner):
    res = runner.invoke(cli, ["demo"])
    assert "demo.duckdb" in res.stdout and "policy.toml" in res.stdout
    for args in (["--help"], ["query", "--help"], ["demo", "--help"]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0 and "Usage:" in res.stdout


@pytest.mark.parametrize("value, hw, text", [
    (1204.3, 27.0, "1204 ±27"), (0.12345, 0.011, "0.123 ±0.011"), (5.0, None, "5"), (None, 1.0, "NULL"),
    ("CA", None, "CA"),
])
def test_format_value(value, hw, text):
    assert format_value(value, hw) == text
