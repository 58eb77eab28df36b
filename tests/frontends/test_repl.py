"""The REPL's pure parts, and its loop over a pipe (no terminal needed)."""
from __future__ import annotations

import io

import pytest

from dpsql.frontends import repl
from dpsql.frontends.repl import candidates, is_complete, parse_meta
from dpsql.sqltext import split_statements


# -- statement splitting
def test_split_simple_and_rest():
    assert split_statements("SELECT 1; SELECT 2;") == (["SELECT 1;", "SELECT 2;"], "")
    assert split_statements("SELECT 1; SELECT") == (["SELECT 1;"], " SELECT")


def test_split_across_lines():
    stmts, rest = split_statements("SELECT state,\n  COUNT(*)\nFROM people\nGROUP BY state;\n")
    assert stmts == ["SELECT state,\n  COUNT(*)\nFROM people\nGROUP BY state;"] and rest == "\n"


def test_semicolons_in_strings_and_comments_do_not_split():
    sql = "SELECT COUNT(*) FROM people WHERE state = 'C;A' AND x = 'it''s;'; "
    assert split_statements(sql) == (["SELECT COUNT(*) FROM people WHERE state = 'C;A' AND x = 'it''s;';"], " ")
    assert split_statements('SELECT "a;b" FROM t;')[0] == ['SELECT "a;b" FROM t;']
    assert split_statements("SELECT 1 -- no; end\n")[0] == []
    assert split_statements("SELECT /* ; */ 1;")[0] == ["SELECT /* ; */ 1;"]


def test_unterminated_string_is_unfinished():
    assert split_statements("SELECT 'a;") == ([], "SELECT 'a;")


def test_empty_statements_are_dropped():
    assert split_statements(";;SELECT 1;") == (["SELECT 1;"], "")


@pytest.mark.parametrize("text, complete", [
    ("", True), ("   ", True), ("\\budget", True), ("\\explain SELECT COUNT(*) FROM people", True),
    ("SELECT COUNT(*)", False), ("SELECT COUNT(*)\nFROM people;", True), ("SELECT ';'", False),
    ("SELECT 1; -- done", True), ("SELECT 'x;", False), ("SELECT 1;\nSELECT", False),
])
def test_is_complete(text, complete):
    assert is_complete(text) is complete


# -- meta-commands
def test_parse_meta():
    assert parse_meta("\\epsilon 0.5") == repl.Meta("epsilon", "0.5", True)
    assert parse_meta("  \\epsilon 0.5; ") == repl.Meta("epsilon", "0.5", True)
    assert parse_meta("\\mechanism gaussian") == repl.Meta("mechanism", "gaussian", True)
    assert parse_meta("\\explain SELECT COUNT(*) FROM people;").arg == "SELECT COUNT(*) FROM people;"
    assert parse_meta("\\q") == repl.Meta("q", "", True)
    assert parse_meta("\\quit").name == "q"
    assert parse_meta("\\BUDGET").name == "budget"
    assert parse_meta("\\nope x") == repl.Meta("nope", "x", False)
    for name in ("budget", "policy", "explain", "epsilon", "mechanism", "timing", "chart", "help", "q"):
        assert parse_meta("\\" + name).known


# -- completion
TABLES, COLUMNS = ["people", "visits"], ["person_id", "age", "income", "state"]


def test_complete_tables_columns_keywords():
    assert candidates("SELECT COUNT(*) FROM peo", TABLES, COLUMNS) == ["people"]
    assert candidates("SELECT COUNT(*) FROM pe", TABLES, COLUMNS)[:2] == ["people", "person_id"]
    assert candidates("SEL", TABLES, COLUMNS) == ["SELECT"]
    assert candidates("sel", TABLES, COLUMNS) == ["select"]
    assert "GROUP" in candidates("SELECT a FROM people GR", TABLES, COLUMNS)
    assert "state" in candidates("SELECT st", TABLES, COLUMNS)
    assert "dpsql.epsilon" in candidates("SET dpsql.e", TABLES, COLUMNS)
    assert candidates("SHOW dpsql.b", TABLES, COLUMNS) == ["dpsql.budget"]
    assert candidates("SELECT ", TABLES, COLUMNS) == []


def test_complete_meta_commands():
    assert candidates("\\bu", TABLES, COLUMNS) == ["\\budget"]
    assert set(candidates("\\", TABLES, COLUMNS)) >= {"\\budget", "\\policy", "\\explain", "\\chart", "\\q"}
    assert candidates("\\explain SELECT COUNT(*) FROM peo", TABLES, COLUMNS) == ["people"]


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    from dpsql.session import Session
    with Session.open(None, None, None) as s:
        yield s


def test_completion_words_come_from_the_policy(session):
    tables, columns = repl.completion_words(session)
    assert tables == ["people", "visits"]
    assert {"person_id", "age", "income", "state", "visit_date"} <= set(columns)


def test_completer_yields_prompt_toolkit_completions(session):
    from prompt_toolkit.document import Document
    comp = repl._completer(session)
    got = [(c.text, c.start_position) for c in comp.get_completions(Document("SELECT COUNT(*) FROM peo"), None)]
    assert got == [("people", -3)]


def _drive(session, keys: str) -> tuple[int, str]:
    from prompt_toolkit.input import create_pipe_input
    out = io.StringIO()
    with create_pipe_input() as inp:
        inp.send_text(keys)
        rc = repl.run(session, input=inp, output=out)
    return rc, out.getvalue()


def test_loop_over_a_pipe(session):
    rc, out = _drive(session, "SELECT state,\r COUNT(*) FROM people GROUP BY state;\r\\budget\r"
                               "\\chart\r\\explain SELECT COUNT(*) FROM people;\r\\policy\rSELECT * FROM people;\r"
                               "\\nope\r\\timing\rSHOW dpsql.epsilon;\r\\help\r\x04")
    assert rc == 0
    flat = " ".join(out.split())                   # the status line may wrap at the terminal's width
    assert "type \\help" in out.lower() and "remaining rho 1.539 of 1.539" in flat   # the demo: zCDP
    assert "±" in out and "remaining rho 1.489 of 1.539" in flat
    assert out.count("█") >= 8 and "TX" in out
    assert "rewritten_sql" in out
    assert "ERROR:" in out and "[42501]" in out and "Traceback" not in out
    assert "unknown command \\nope" in out and "\\help" in out
    assert "Time:" in out
    assert "\\mechanism" in out and "SET dpsql.epsilon" in out and "SHOW dpsql.budget" in out
    assert "[0, 120]" in out and "person_id" in out
    assert session.spending().rho_spent == pytest.approx(0.05, rel=1e-6)   # calibrated to at most rho


def test_quit_and_internal_errors(session, monkeypatch):
    def boom(sql, params=None):
        raise RuntimeError("kaput")
    monkeypatch.setattr(session, "execute", boom)
    rc, out = _drive(session, "SELECT COUNT(*) FROM people;\r\\q\r")
    assert rc == 0 and "internal error: RuntimeError: kaput" in out and "Traceback" not in out


def test_history_file_is_written(session, tmp_path):
    hist = tmp_path / "h" / "history"
    from prompt_toolkit.input import create_pipe_input
    with create_pipe_input() as inp:
        inp.send_text("SHOW dpsql.epsilon;\r\x04")
        assert repl.run(session, history=hist, input=inp, output=io.StringIO()) == 0
    assert "SHOW dpsql.epsilon;" in hist.read_text()


def test_cancel_in_worker(session, monkeypatch):
    """Ctrl-C while a query runs: the session is cancelled and the loop goes on."""
    import threading
    cancelled = threading.Event()
    monkeypatch.setattr(session, "execute", lambda sql, params=None: cancelled.wait(5))
    monkeypatch.setattr(session, "cancel", cancelled.set)
    out = io.StringIO()
    from rich.console import Console
    r = repl._Repl(session, Console(file=out), prompt=None)
    joins = iter([KeyboardInterrupt])

    real_join = threading.Thread.join

    def join(self, timeout=None):
        exc = next(joins, None)
        if exc is not None:
            raise exc
        return real_join(self, timeout)
    monkeypatch.setattr(threading.Thread, "join", join)
    assert r.execute("SELECT COUNT(*) FROM people") is None
    assert cancelled.is_set() and "query cancelled" in out.getvalue()
