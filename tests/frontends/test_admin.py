"""Admin commands: `dpsql budget` and `dpsql policy check`, and policy.locate behind the line numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.demo import policy_toml
from dpsql.frontends.cli import cli
from dpsql.policy import locate
from tests.conftest import policy_for


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    return CliRunner()


@pytest.fixture
def policy_file(tmp_path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(policy_toml(policy_for(tmp_path)))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# -- budget --------------------------------------------------------------------------------------------

def test_budget_lists_every_analyst_with_their_spending(runner, people_db, policy_file):
    for analyst, eps in (("alice", "1"), ("bob", "2.5"), ("alice", "0.5")):
        res = runner.invoke(cli, ["query", people_db, "SELECT COUNT(*) FROM people", "-p", str(policy_file),
                                  "-a", analyst, "-e", eps])
        assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["budget", "--policy", str(policy_file), "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["analyst"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows == {   # basic composition (policy_for); rho is recorded all the same: epsilon^2 / 2 per Laplace query
        "alice": {"analyst": "alice", "epsilon_spent": 1.5, "epsilon_remaining": 98.5, "delta_spent": 0.0,
                  "delta_remaining": 1e-6, "queries": 2, "rho_spent": 0.625, "rho_remaining": None,
                  "accountant": "basic"},
        "bob": {"analyst": "bob", "epsilon_spent": 2.5, "epsilon_remaining": 97.5, "delta_spent": 0.0,
                "delta_remaining": 1e-6, "queries": 1, "rho_spent": 3.125, "rho_remaining": None,
                "accountant": "basic"},
    }
    res = runner.invoke(cli, ["budget", "-p", str(policy_file)])
    lines = res.stdout.splitlines()
    assert lines[0].split(" | ")[0].strip() == "analyst" and "queries" in lines[0]
    assert lines[2].startswith("alice") and lines[3].startswith("bob") and "(2 rows)" in res.stdout
    res = runner.invoke(cli, ["budget", "-p", str(policy_file), "--format", "csv"])
    assert res.stdout.splitlines()[1] == "alice,1.5,98.5,0.0,1e-06,2,0.625,,basic"


def test_budget_without_a_ledger_is_empty_and_creates_nothing(runner, policy_file, tmp_path):
    res = runner.invoke(cli, ["budget", "-p", str(policy_file), "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["rows"] == []
    assert not (tmp_path / "ledger.sqlite").exists()


def test_budget_bad_policy_is_one_clean_error(runner, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[budget]\nepsilon = -1\n")
    res = runner.invoke(cli, ["budget", "-p", str(bad)])
    assert res.exit_code == 1 and "line 2: budget.epsilon" in res.output and "[F0000]" in res.output
    assert "Traceback" not in res.output


# -- policy check ------------------------------------------------------------------------------------

def test_policy_check_good_file(runner, policy_file):
    res = runner.invoke(cli, ["policy", "check", str(policy_file)])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"OK: {policy_file}: 3 protected tables"


def test_policy_check_bad_bounds_gives_the_line(runner, policy_file):
    text = policy_file.read_text().replace("age = { lower = 0, upper = 120 }", "age = { lower = 5, upper = 1 }", 1)
    policy_file.write_text(text)
    n = _line_of(policy_file, "lower = 5, upper = 1")
    res = runner.invoke(cli, ["policy", "check", str(policy_file)])
    assert res.exit_code == 1
    assert f"p.toml: line {n}: tables.people.columns.age: need lower <= upper" in res.stdout
    assert "1 problem" in res.stderr


def test_policy_check_unknown_key_gives_its_line(runner, policy_file):
    text = policy_file.read_text().replace("[tables.visits]\n", "[tables.visits]\nmax_row = 3\n")
    policy_file.write_text(text)
    n = _line_of(policy_file, "max_row = 3")
    res = runner.invoke(cli, ["policy", "check", str(policy_file)])
    assert res.exit_code == 1 and f"line {n}: tables.visits.max_row: unknown key" in res.stdout


def test_policy_check_invalid_toml_gives_tomllib_line(runner, policy_file):
    lines = policy_file.read_text().splitlines()
    n = _line_of(policy_file, "mechanism = ")
    lines[n - 1] = "mechanism = = laplace"
    policy_file.write_text("\n".join(lines) + "\n")
    res = runner.invoke(cli, ["policy", "check", str(policy_file)])
    assert res.exit_code == 1 and f"p.toml: line {n}: not valid TOML" in res.stdout


def test_policy_check_missing_file(runner, tmp_path):
    res = runner.invoke(cli, ["policy", "check", str(tmp_path / "nope.toml")])
    assert res.exit_code == 1 and "cannot read" in res.stdout and "Traceback" not in res.output


def test_policy_check_against_a_database(runner, people_db, policy_file, tmp_path):
    res = runner.invoke(cli, ["policy", "check", str(policy_file), "--database", people_db])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"OK: {policy_file}: 3 protected tables")
    assert not (tmp_path / "ledger.sqlite").exists()                    # no session, no ledger
    text = policy_file.read_text().replace("visit_date = {", "visit_day = {")
    text = text.replace('sex = { values = ["F", "M"] }', "sex = { values = [1, 2] }", 1)
    policy_file.write_text(text)
    res = runner.invoke(cli, ["policy", "check", str(policy_file), "-d", people_db])
    assert res.exit_code == 1
    assert f"line {_line_of(policy_file, 'visit_day')}: tables.visits.columns.visit_day: no such column" in res.stdout
    policy_file.write_text(text.replace("visit_day = {", "visit_date = {"))
    res = runner.invoke(cli, ["policy", "check", str(policy_file), "-d", people_db])
    assert res.exit_code == 1
    assert f"line {_line_of(policy_file, 'values = [1, 2]')}: tables.people.columns.sex:" in res.stdout
    res = runner.invoke(cli, ["policy", "check", str(policy_file), "-d", str(tmp_path / "missing" / "x.duckdb")])
    assert res.exit_code == 1 and "Traceback" not in res.output


# -- locate ----------------------------------------------------------------------------------------------

TOML = """\
# a comment [not.a.table]
[budget]
epsilon = 1.0   # lifetime

[tables.people]
privacy_unit = "id"
note = \"\"\"
max_rows = 9
\"\"\"
[tables.people.columns]
age = { lower = 5, upper = 1 }
state = { values = ["a", "b,c"], identifier = true }
"quoted key" = { x = { y = 1 } }
long = { values = [
  "x", "y"] }
after = {}
tables.visits.privacy_unit = "v"
"""


@pytest.mark.parametrize("key, line", [
    ("budget", 2), ("budget.epsilon", 3), ("budget.delta", 2),          # missing key: its table
    ("tables.people", 5), ("tables.people.privacy_unit", 6), ("tables.people.max_rows", 5),
    ("tables.people.columns", 10), ("tables.people.columns.age", 11), ("tables.people.columns.age.lower", 11),
    ("tables.people.columns.age.upper", 11), ("tables.people.columns.state.identifier", 12),
    ("tables.people.columns.quoted key.x.y", 13), ("tables.people.columns.long", 14),
    ("tables.people.columns.after", 16), ("tables.people.columns.tables.visits.privacy_unit", 17),
    ("defaults.epsilon", None), ("not.a.table", None),
])
def test_locate(key, line):
    assert locate(TOML, key) == line
