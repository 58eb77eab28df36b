"""The README's first steps run as written on a fresh machine, the policy example of docs/POLICY.md
validates against the demo, every command's --help names every target kind, and .gitignore covers test leftovers."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsql.frontends.cli import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
POLICY = (ROOT / "docs" / "POLICY.md").read_text(encoding="utf-8")


def _block(after: str, lang: str, text: str = README) -> str:
    start = text.index(after)
    m = re.compile(rf"^```{lang}\n(.*?)^```", re.MULTILINE | re.DOTALL).search(text, start)
    return m.group(1)


def test_install_names_the_python_version_and_the_virtualenv_before_the_commands():
    first = README.index("```sh")
    assert "Python 3.11" in README[:first]
    commands = _block("# dpsql", "sh")
    assert commands.index("python3 -m venv") < commands.index("pip install .") < commands.index("dpsql query")


def test_quick_start_runs_as_written(tmp_path):
    code = _block("### 2. Quick start", "python")
    env = {**os.environ, "DPSQL_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], check=False, cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "CA" in r.stdout and "zcdp" in r.stdout          # rows, then SHOW dpsql.budget


def test_own_data_steps_match_the_commands(tmp_path, monkeypatch):
    import duckdb
    steps = _block("### 5. Your own data in one step", "sh")
    assert "dpsql init people.csv" in steps and "dpsql policy check people.toml --database people.csv" in steps
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    duckdb.connect().execute("COPY (SELECT i AS person_id, i % 90 AS age FROM range(500) t(i)) "
                             "TO 'people.csv' (HEADER)")
    runner = CliRunner()
    for line in steps.splitlines():
        cmd = line.split("#")[0].split()
        if not cmd or cmd[0] != "dpsql":
            if cmd and cmd[0] == "$EDITOR":          # the user's edit: choose the unit
                text = Path("people.toml").read_text()
                Path("people.toml").write_text(text.replace('# privacy_unit = "person_id"',
                                                            'privacy_unit = "person_id"'))
            continue
        args = [a.strip('"') for a in re.findall(r'"[^"]*"|\S+', line.split("  #")[0])][1:]
        r = runner.invoke(cli, args)
        assert r.exit_code == 0, (line, r.output)


def test_policy_example_validates_against_the_demo(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    from dpsql.session import Session
    db, _, _ = Session.demo()
    pol = tmp_path / "policy.toml"
    pol.write_text(_block("## The policy", "toml", POLICY))
    r = CliRunner().invoke(cli, ["policy", "check", str(pol), "--database", str(db)])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("command", [["query"], ["explain"], ["repl"], ["serve"], ["policy", "check"]])
def test_help_names_every_target_kind(command):
    text = " ".join(CliRunner().invoke(cli, [*command, "--help"]).output.split())
    for kind in ("DuckDB file", ".csv", ".parquet", "postgresql://", "spark://"):
        assert kind in text, (command, kind)


def test_gitignore_covers_test_leftovers():
    ignored = (ROOT / ".gitignore").read_text().split()
    for pattern in ("spark-warehouse/", "metastore_db/", "derby.log", ".pytest_cache/", ".hypothesis/"):
        assert pattern in ignored


def test_readme_is_short_and_every_relative_link_resolves():
    assert len(README.splitlines()) < 400
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([\w./-]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (page.name, target)
