"""Syntax errors in the shells point at the position, as psql does: `LINE n: ...` and a caret
under the character PostgreSQL's Position names, then the hint."""
from __future__ import annotations

import io

import pytest
from click.testing import CliRunner

from dpsql.frontends import repl
from dpsql.frontends.cli import cli
from dpsql.frontends.render import caret


def test_caret_points_at_the_position():
    assert caret("SELEC 1", 1) == "LINE 1: SELEC 1\n        ^"
    sql = "SELECT COUNT(*)\n  FROM people WHER age > 30"
    pos = sql.index("age") + 1
    assert caret(sql, pos) == "LINE 2:   FROM people WHER age > 30\n" + " " * (len("LINE 2: ") + 19) + "^"
    assert caret(sql, pos, first_line=10).startswith("LINE 11: ")
    assert caret("SELECT 1 +", 11) == "LINE 1: SELECT 1 +\n" + " " * 18 + "^"      # at end of input
    assert caret("SELECT 1", None) is None and caret("SELECT 1", 99) is None


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))


def test_query_command_shows_the_caret_and_hint(home):
    res = CliRunner().invoke(cli, ["query", "SELECT COUNT(*) FROM people WHER age > 30"])
    assert res.exit_code == 1
    lines = res.output.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("LINE 1: "))
    assert 'syntax error at or near "age" [42601]' in lines[i - 1]
    assert lines[i + 1].index("^") == lines[i].index("age")
    assert 'did you mean "WHERE"?' in res.output


def test_script_mode_points_into_the_script(home):
    script = "SELECT COUNT(*) FROM people;\nSELECT COUNT(*)\n  FROM people GROUP;\n"
    res = CliRunner().invoke(cli, ["repl"], input=script)
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = err.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("LINE 3: "))
    assert lines[i - 1].startswith('ERROR: syntax error at or near "GROUP" [42601]')
    assert lines[i + 1].index("^") == lines[i].index("GROUP")


def test_interactive_repl_shows_the_caret(home):
    from prompt_toolkit.input import create_pipe_input

    from dpsql.session import Session
    out = io.StringIO()
    with Session.open(None, None, None) as session, create_pipe_input() as inp:
        inp.send_text("SELEC COUNT(*) FROM people;\r\x04")
        assert repl.run(session, input=inp, output=out) == 0
    text = out.getvalue()
    assert 'syntax error at or near "SELEC" [42601]' in text
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("LINE 1: SELEC"))
    assert lines[i + 1].index("^") == lines[i].index("SELEC")
    assert 'did you mean "SELECT"?' in text
