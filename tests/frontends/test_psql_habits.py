"""psql's and DuckDB's habits in the REPL and in script mode: \\d, \\dt, \\x, \\o, \\i, \\e, \\copy,
\\pset, --ascii, help/quit/exit, SHOW TABLES, DESCRIBE, .tables, and context-aware completion.
The catalog answers come from the policy and the schema: names, types and declarations only."""
from __future__ import annotations

import csv
import io
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from dpsql.frontends import repl
from dpsql.frontends.cli import cli
from dpsql.frontends.meta import (
    catalog_statement,
    is_meta_line,
    parse_copy,
    parse_meta,
)
from dpsql.frontends.repl import candidates


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    return CliRunner()


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    from dpsql.session import Session
    with Session.open(None, None, None) as s:
        yield s


def _drive(session, keys: str, **kw) -> tuple[int, str]:
    from prompt_toolkit.input import create_pipe_input
    out = io.StringIO()
    with create_pipe_input() as inp:
        inp.send_text(keys)
        rc = repl.run(session, input=inp, output=out, **kw)
    return rc, out.getvalue()


# -- parsing
def test_parse_meta_forms():
    assert parse_meta("\\d people") == repl.Meta("d", "people", True)
    assert parse_meta("\\dt") == repl.Meta("dt", "", True)
    assert parse_meta("\\d+ people").name == "d"
    assert parse_meta("quit").name == parse_meta("exit;").name == parse_meta("\\quit").name == "q"
    assert parse_meta("help").name == "help"
    assert parse_meta(".tables") == repl.Meta("dt", "", True)
    assert parse_meta(".schema people") == repl.Meta("d", "people", True)
    assert not parse_meta(".mode box").known
    assert parse_meta("\\copy (SELECT 1) TO 'x.csv'").arg == "(SELECT 1) TO 'x.csv'"
    for line in ("quit", "exit", "help", ".tables", "\\x"):
        assert is_meta_line(line)
    for line in ("SELECT 1;", "helpful", "quitting now"):
        assert not is_meta_line(line)
    assert catalog_statement("show tables;") == repl.Meta("dt", "", True)
    assert catalog_statement("DESCRIBE people") == repl.Meta("d", "people", True)
    assert catalog_statement("DESCRIBE SELECT 1") is None


def test_parse_copy():
    assert parse_copy("(SELECT COUNT(*) FROM people) TO 'a b.csv'") == ("SELECT COUNT(*) FROM people", "a b.csv")
    assert parse_copy("(SELECT (1)) TO STDOUT WITH (FORMAT csv, HEADER)") == ("SELECT (1)", None)
    assert parse_copy("(SELECT 1) TO out.csv CSV HEADER;") == ("SELECT 1", "out.csv")
    from dpsql import errors
    with pytest.raises(errors.QueryRejected, match="only a query's noisy result"):
        parse_copy("people TO 'rows.csv'")
    with pytest.raises(errors.Error, match="does not take"):
        parse_copy("(SELECT 1) TO 'x' (FORMAT binary)")


# -- script mode: every meta-command, or a reason
def test_script_mode_catalog_commands_show_names_and_types_only(runner):
    script = "\\dt\nSHOW TABLES;\n.tables\n\\d people\nDESCRIBE visits;\n.schema people\n\\d nosuch\n"
    res = runner.invoke(cli, ["repl"], input=script)
    assert res.exit_code == 1, res.output                      # \d nosuch failed
    out = res.stdout
    assert out.count("protected table") == 6                    # people and visits, three times
    assert "person_id" in out and "privacy unit" in out and "bounds [0, 120]" in out
    assert "BIGINT" in out or "INTEGER" in out
    assert 'did not find any table named "nosuch"' in res.stderr and "tables: people, visits" in res.stderr
    assert "rho charged" not in res.stderr                      # nothing was charged, nothing ran on the data


def test_script_mode_x_pset_o_i_copy_and_quit(runner, tmp_path):
    inc = tmp_path / "inc.sql"
    inc.write_text("\\epsilon 1\nSELECT COUNT(*) AS n FROM people;\n")
    out_file, csv_file = tmp_path / "out.txt", tmp_path / "noisy.csv"
    script = (f"\\x\nSELECT sex, COUNT(*) AS n FROM people GROUP BY sex;\n\\x off\n"
              f"\\pset border 2\n\\i {inc}\n\\pset border 1\n"
              f"\\o {out_file}\nSHOW dpsql.epsilon;\n\\o\n"
              f"\\copy (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) TO '{csv_file}'\n"
              "\\e\nquit\nSELECT 'never run';\n")
    res = runner.invoke(cli, ["repl"], input=script)
    out = res.stdout
    assert "-[ RECORD 1 ]" in out and "sex | " in out                  # expanded
    assert "+-----" in out and " n |" in out                            # border 2, from the included file
    assert "epsilon" in out_file.read_text() and "| epsilon" not in out.split("+-----")[-1]
    rows = list(csv.reader(csv_file.open()))
    assert rows[0] == ["sex", "n"] and len(rows) == 3 and all(float(r[1]) > 1000 for r in rows[1:])
    assert "COPY 2" in res.stderr
    assert "\\e is not available in script mode" in res.stderr and "editor" in res.stderr
    assert "never run" not in out                                      # quit stopped the script
    assert res.exit_code == 1                                          # \e is reported as an error


def test_script_mode_copy_refuses_rows_and_help_lists_commands(runner):
    res = runner.invoke(cli, ["repl"], input="\\copy people TO 'rows.csv'\nhelp\n")
    assert "only a query's noisy result" in res.stderr
    assert not os.path.exists("rows.csv")
    for cmd in ("\\d [NAME]", "\\x", "\\o [FILE]", "\\i FILE", "\\copy", "\\pset", "(not in scripts)", ".tables"):
        assert cmd in res.stdout, cmd


def test_script_mode_conninfo_and_echo(runner):
    res = runner.invoke(cli, ["repl"], input="\\conninfo\n\\echo 'hello there'\n")
    assert res.exit_code == 0, res.output
    assert 'as analyst "analyst"' in res.stderr and "demo.duckdb" in res.stderr and "hello there\n" in res.stdout


def test_script_mode_unknown_dot_command_says_which_exist(runner):
    res = runner.invoke(cli, ["repl"], input=".mode box\n")
    assert res.exit_code == 1 and "unknown command .mode" in res.stderr and ".tables" in res.stderr


# -- the interactive loop
def test_interactive_catalog_expanded_ascii_and_exit(session):
    rc, out = _drive(session, "SHOW TABLES;\r\\d people\r\\x\rSELECT sex, COUNT(*) FROM people GROUP BY sex;\r"
                              "\\x\r\\pset linestyle ascii\rSELECT COUNT(*) AS n FROM people;\rexit\r")
    assert rc == 0
    assert "protected table" in out and "privacy unit" in out
    assert "-[ RECORD 1 ]" in out
    assert "--+--" not in out.split("Line style is ascii.")[0][-50:]
    tail = out.split("Line style is ascii.")[1]
    assert "\n-" in tail and "┃" not in tail and "━" not in tail     # ASCII rules only after \pset
    assert "±" in tail


def test_interactive_ascii_flag_and_help_word(session):
    rc, out = _drive(session, "help\rSELECT COUNT(*) AS n FROM people;\rquit\r", ascii=True)
    assert rc == 0 and "Meta-commands:" in out and "\\copy" in out
    table = out.split("SELECT COUNT(*) AS n FROM people;")[-1]
    assert "━" not in table and "┃" not in table and "n\n" in table.replace(" ", "")


def test_interactive_o_i_copy(session, tmp_path):
    inc, out_file, csv_file = tmp_path / "q.sql", tmp_path / "o.txt", tmp_path / "c.csv"
    inc.write_text("SELECT COUNT(*) AS n FROM people;\n\\budget\n")
    rc, out = _drive(session, f"\\o {out_file}\r\\i {inc}\r\\o\r"
                              f"\\copy (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) TO '{csv_file}'\r\\q\r")
    assert rc == 0
    written = out_file.read_text()
    assert "±" in written and "epsilon_remaining" in written and "rho charged" not in written
    assert "rho charged" in out                                  # the status stays on the screen
    assert next(csv.reader(csv_file.open())) == ["sex", "n"] and "COPY 2" in out


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script as the editor")
def test_interactive_e_edits_the_last_query_in_the_editor(session, tmp_path, monkeypatch):
    editor = tmp_path / "ed.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/COUNT(\\*) AS n/COUNT(*) AS edited/' \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    rc, out = _drive(session, "SELECT COUNT(*) AS n FROM people;\r\\e\r\\q\r")
    assert rc == 0 and "SELECT COUNT(*) AS edited FROM people;" in out
    assert out.count("rho charged") == 2                           # the edited query ran


# -- completion
SCHEMA = {"people": ["person_id", "age", "income", "state"], "visits": ["person_id", "visit_date", "cost"],
          "regions": ["state", "region"]}
TABLES, COLUMNS = ["people", "visits"], ["person_id", "age", "income", "state", "visit_date", "cost"]


def _c(before, text=None):
    return candidates(before, TABLES, COLUMNS, schema=SCHEMA, text=text)


def test_context_aware_completion():
    assert _c("SELECT COUNT(*) FROM ") == ["people", "visits", "regions"]          # tables after FROM
    assert _c("SELECT COUNT(*) FROM pe") == ["people"]                            # not person_id
    assert _c("SELECT COUNT(*) FROM people JOIN v") == ["visits"]
    assert _c("SELECT COUNT(*) FROM people, r") == ["regions"]
    assert "GROUP" in _c("SELECT a FROM people GR")                               # after the table: keywords
    # columns of the table the statement names, wherever its FROM is
    assert _c("SELECT ", "SELECT  FROM visits") == ["person_id", "visit_date", "cost"]
    assert _c("SELECT c", "SELECT c FROM visits")[:2] == ["cost", "count"]
    assert "age" not in _c("SELECT a", "SELECT a FROM visits")
    assert _c("SELECT COUNT(*) FROM people WHERE ag") == ["age"]
    assert _c("SELECT COUNT(*) FROM people GROUP BY st") == ["state"]
    assert _c("SELECT COUNT(*) FROM regions WHERE re")[0] == "region"
    assert _c("\\d pe") == ["people"] and _c("DESCRIBE vi") == ["visits"]
    assert _c("SET dpsql.e") == ["dpsql.epsilon"]
    assert _c("\\cop") == ["\\copy"]


def test_completer_uses_the_whole_buffer(session):
    from prompt_toolkit.document import Document
    comp = repl._completer(session)
    text = "SELECT vi FROM visits"
    got = [c.text for c in comp.get_completions(Document(text, cursor_position=len("SELECT vi")), None)]
    assert got == ["visit_date"]


def test_script_mode_g_reruns_the_last_query_from_the_cache_and_watch_is_refused(runner, tmp_path):
    """\\g runs the last query again: an identical repeat is the cached answer (same numbers, no
    charge); \\g FILE writes it to FILE and leaves later output on the screen. \\watch is refused
    with its reason, and \\g before any query says there is none."""
    out_file = tmp_path / "again.txt"
    script = ("\\g\nSELECT COUNT(*) AS n FROM people;\n\\g\nSHOW dpsql.budget;\n"
              "SELECT COUNT(*) AS n FROM people;\n\\g\n" f"\\g {out_file}\n\\watch 2\nSHOW dpsql.budget;\n")
    res = runner.invoke(cli, ["repl", "--format", "csv"], input=script)
    assert "there is no query to run yet" in res.stderr
    assert "\\watch is not available" in res.stderr and "cache" in res.stderr
    lines = res.stdout.splitlines()
    counts = [lines[i + 1] for i, line in enumerate(lines) if line == "n"]
    assert len(counts) == 4 and len(set(counts)) == 1, res.stdout          # run, \\g, again, \\g
    written = out_file.read_text().splitlines()
    assert written == ["n", counts[0]]
    budgets = [lines[i + 1] for i, line in enumerate(lines) if line.startswith("analyst,epsilon_spent")]
    assert len(budgets) == 2 and budgets[0] == budgets[1]                  # the repeats were free
