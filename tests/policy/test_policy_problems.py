"""`dpsql policy check` reports every problem of a policy in one run, each with its TOML line;
a policy error at connect time (a declared column the database lacks) keeps the line too."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import dpsql
from dpsql.demo import policy_toml
from dpsql.frontends.cli import cli
from dpsql.policy import load_policy, policy_problems
from tests.conftest import policy_for

BAD = """\
[budget]
epsilon = -1
delta = 0.5

[tables.people]
privacy_unit = "person_id"
max_rows_per_unit = 0

[tables.people.columns]
age = { lower = 10, upper = 1 }
income = { lower = 0 }
state = { values = ["CA"] }

[tables.visits]
link = "person_id -> peple.person_id"

[timing]
quantum = "fast"
bogus = 1
"""

EXPECTED = [
    (2, "budget.epsilon: must be positive"),
    (7, "tables.people.max_rows_per_unit: must be a whole number >= 1"),
    (10, "tables.people.columns.age: need lower <= upper"),
    (11, "tables.people.columns.income: give both lower and upper, or neither"),
    (15, "tables.visits.link: 'peple' is not a protected table"),
    (18, "timing.quantum: must be seconds or a duration"),
    (19, "timing.bogus: unknown key"),
]


@pytest.fixture
def bad(tmp_path) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(BAD)
    return path


def test_every_problem_with_its_line(bad):
    pol, problems = policy_problems(bad)
    assert pol is None
    text = [str(p) for p in problems]
    assert len(text) == len(EXPECTED), text
    for got, (line, what) in zip(text, EXPECTED):
        assert got.startswith(f"policy {bad}: line {line}: {what}"), got


def test_loading_still_stops_at_the_first_problem(bad):
    with pytest.raises(dpsql.PolicyError, match=r"line 2: budget\.epsilon: must be positive"):
        load_policy(str(bad))


def test_a_good_policy_has_no_problems(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(policy_toml(policy_for(tmp_path)))
    pol, problems = policy_problems(path)
    assert problems == [] and pol is not None and pol == load_policy(str(path))


def test_policy_check_prints_them_all(bad, tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    res = CliRunner().invoke(cli, ["policy", "check", str(bad)])
    assert res.exit_code == 1
    out = res.output
    for line, what in EXPECTED:
        assert f"line {line}: {what}" in out, out
    assert f"{len(EXPECTED)} problems" in out


def test_schema_problems_all_reported_with_lines(tmp_path, people_db, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["shoe_size"] = {"lower": 0, "upper": 50}
    pol["tables"]["people"]["columns"]["hat_size"] = {"lower": 0, "upper": 50}
    pol["tables"]["ghosts"] = {"privacy_unit": "id"}
    path = tmp_path / "p.toml"
    path.write_text(policy_toml(pol))
    lines = path.read_text().splitlines()
    res = CliRunner().invoke(cli, ["policy", "check", str(path), "--database", people_db])
    assert res.exit_code == 1
    for key in ("tables.people.columns.shoe_size: no such column", "tables.people.columns.hat_size: no such column",
                "tables.ghosts: no such table"):
        m = re.search(rf"line (\d+): {re.escape(key)}", res.output)
        assert m, res.output
        assert key.split(":")[0].rsplit(".", 1)[-1] in lines[int(m.group(1)) - 1]


def test_connect_time_policy_error_keeps_the_line(tmp_path, people_db):
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["shoe_size"] = {"lower": 0, "upper": 50}
    path = tmp_path / "p.toml"
    path.write_text(policy_toml(pol))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "shoe_size" in text)
    with pytest.raises(dpsql.PolicyError, match=rf"p\.toml: line {line}: tables\.people\.columns\.shoe_size: "
                                                r"no such column"):
        dpsql.connect(people_db, policy=str(path), analyst="alice")
