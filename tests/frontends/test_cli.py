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
    # the demo: zCDP accounting, Gaussian noise, each query calibrated to rho 0.05
    assert "rho charged 0.05 (this query alone: epsilon " in res.stderr
    assert "remaining rho 1.489 of 1.539" in res.stderr


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


# -- repl: script mode (stdin not a terminal) ---------------------------------------------------------

SCRIPT = """-- three statements; the second is refused
SELECT COUNT(*) AS n FROM people;
SELECT * FROM people;   -- refused: releases rows
SELECT sex, COUNT(*) AS n
  FROM people GROUP BY sex;
"""


def test_script_mode_runs_every_statement_and_reports_the_failure(runner):
    res = runner.invoke(cli, ["repl"], input=SCRIPT)
    assert res.exit_code == 1, res.output
    assert res.stdout.count("(1 row)") == 1 and "(2 rows)" in res.stdout     # both good ones ran
    assert "ERROR: SELECT * is not allowed" in res.stderr and "[42501]" in res.stderr
    assert "HINT:" in res.stderr and "LINE 3: SELECT * FROM people" in res.stderr
    assert res.stderr.count("rho charged") == 2                              # status of each private result
    assert "Traceback" not in res.output


def test_script_mode_all_good_exits_0_and_meta_commands(runner):
    script = ("\\epsilon 1\nSELECT COUNT(*) AS n FROM people;\n\\budget\n"
              "\\explain SELECT COUNT(*) FROM people\n/* ; */ -- ;\n")
    res = runner.invoke(cli, ["repl"], input=script)
    assert res.exit_code == 0, res.output
    assert "epsilon_remaining" in res.stdout and "rho_remaining" in res.stdout and "rewritten_sql" in res.stdout
    assert "(this query alone: epsilon 1, delta 1e-08)" in res.stderr and "remaining rho 1.5" in res.stderr
    assert "budget_left" in res.stdout
    assert "ERROR" not in res.output


def test_script_mode_csv_and_json(runner):
    res = runner.invoke(cli, ["repl", "--format", "csv"],
                        input="SET dpsql.epsilon = 1;\nSELECT sex, COUNT(*) AS n FROM people GROUP BY sex;\n"
                              "SELECT COUNT(*) AS n FROM people;")
    assert res.exit_code == 0, res.output
    blocks = [b.splitlines() for b in res.stdout.strip().split("\n\n")]
    assert [b[0] for b in blocks] == ["sex,n", "n"] and len(blocks[0]) == 3
    assert "epsilon charged" not in res.stderr                               # machine formats: data only
    res = runner.invoke(cli, ["repl", "--format", "json"], input="SELECT COUNT(*) AS n FROM people;")
    assert json.loads(res.stdout)["columns"] == ["n"]


def test_script_mode_bad_meta_command_and_bad_target(runner, people_db):
    res = runner.invoke(cli, ["repl"], input="\\epsilon lots\n\\frobnicate\nSELECT COUNT(*) FROM people;\n")
    assert res.exit_code == 1
    assert "\\epsilon takes a number" in res.stderr and "unknown command \\frobnicate" in res.stderr
    assert "(1 row)" in res.stdout
    res = runner.invoke(cli, ["repl", people_db], input="")
    assert res.exit_code == 2 and "--policy" in res.output
    res = runner.invoke(cli, ["repl", people_db, "-p", "/nonexistent/p.toml", "-a", "x"], input="")
    assert res.exit_code == 1 and "cannot read" in res.output and "Traceback" not in res.output


def test_repl_on_a_terminal_runs_the_interactive_prompt(runner, monkeypatch, tmp_path):
    import types

    import dpsql.frontends
    from dpsql.frontends import cli as cli_module
    seen = {}

    def run(session, history, ascii=False):
        seen["analyst"], seen["history"] = session.analyst, str(history)
        seen["ascii"] = ascii
        return 3

    fake = types.ModuleType("dpsql.frontends.repl")
    fake.run = run
    monkeypatch.setitem(__import__("sys").modules, "dpsql.frontends.repl", fake)
    monkeypatch.setattr(dpsql.frontends, "repl", fake, raising=False)
    monkeypatch.setattr(cli_module, "_stdin_is_tty", lambda: True)
    res = runner.invoke(cli, ["repl"])
    assert res.exit_code == 3, res.output
    assert seen == {"analyst": "analyst", "history": str(tmp_path / "home" / "history"), "ascii": False}
    res = runner.invoke(cli, ["repl", "--history", str(tmp_path / "h"), "--ascii"])
    assert seen["history"] == str(tmp_path / "h") and seen["ascii"] is True


def test_query_does_not_import_the_repl():
    import subprocess
    import sys
    code = ("import sys; import dpsql.frontends.cli; "
            "assert 'dpsql.frontends.repl' not in sys.modules and 'prompt_toolkit' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_split_script():
    from dpsql.frontends.meta import split_script
    text = ("SELECT ';' AS a FROM t; -- a ; in a comment\n/* ; */\n\\budget\n"
            "SELECT \"x;y\" FROM t\n;\n  \\explain SELECT 1;\nSELECT $$;$$")
    parts = split_script(text)
    assert [(p.line, p.meta) for p in parts] == [(1, False), (3, True), (4, False), (6, True), (7, False)]
    assert parts[0].text == "SELECT ';' AS a FROM t" and parts[1].text == "\\budget"
    assert parts[3].text == "\\explain SELECT 1;" and parts[4].text == "SELECT $$;$$"
    assert split_script("-- only a comment;\n") == []


# -- explain --------------------------------------------------------------------------------------------

def test_explain_shows_the_rewrite_and_charges_nothing(runner):
    res = runner.invoke(cli, ["explain", "SELECT AVG(income) FROM people"])
    assert res.exit_code == 0, res.output
    assert "rewritten_sql" in res.stdout and "SELECT" in res.stdout and "charge" in res.stdout
    res = runner.invoke(cli, ["explain", "EXPLAIN DP SELECT COUNT(*) FROM people", "--format", "json"])
    assert res.exit_code == 0, res.output
    facts = [r["fact"] for r in json.loads(res.stdout)["rows"]]
    assert "rewritten_sql" in facts and "charge: total" in facts
    res = runner.invoke(cli, ["budget", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"] == []                                # nobody was charged


def test_explain_refusal_and_own_database(runner, people_db, tmp_path):
    from dpsql.demo import policy_toml
    from tests.conftest import policy_for
    res = runner.invoke(cli, ["explain", "SELECT * FROM people"])
    assert res.exit_code == 1 and "[42501]" in res.output and "Traceback" not in res.output
    pol = tmp_path / "p.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)))
    res = runner.invoke(cli, ["explain", people_db, "EXPLAIN DP (WIDE) SELECT SUM(income) FROM people", "-p", str(pol), "-a", "zoe",
                              "-e", "2", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["item"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["charge"]["epsilon"] == 2.0 and "people" in rows["rewritten_sql"]["detail"]


# -- help and version -------------------------------------------------------------------------------------

def _commands(group, path=()):
    import click
    for name, cmd in group.commands.items():
        yield path + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path + (name,))


def test_every_command_has_help_mentioning_each_option(runner):
    res = runner.invoke(cli, ["--help"])
    assert res.exit_code == 0
    for name in ("query", "repl", "explain", "budget", "policy", "demo"):
        assert f"  {name} " in res.stdout
    for path, cmd in _commands(cli):
        res = runner.invoke(cli, [*path, "--help"])
        assert res.exit_code == 0, path
        assert cmd.help and "Usage:" in res.stdout
        for param in cmd.params:
            if param.param_type_name == "option":
                assert any(o in res.stdout for o in param.opts), (path, param.opts)
                assert param.help or param.name == "help", (path, param.name)
    res = runner.invoke(cli, ["--version"])
    assert res.exit_code == 0 and "version" in res.stdout
