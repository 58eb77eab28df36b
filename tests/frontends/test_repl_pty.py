"""The real REPL in a pseudo-terminal (pexpect): typing, Tab, Ctrl-D."""
from __future__ import annotations

import os
import sys

import pexpect
import pytest

TIMEOUT = 20
PROMPT = "analyst=>"


@pytest.fixture
def repl(tmp_path):
    env = dict(os.environ, DPSQL_HOME=str(tmp_path / "home"), TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1",
               COLUMNS="160", LINES="50", NO_COLOR="1", PYTHONUNBUFFERED="1")
    child = pexpect.spawn(sys.executable, ["-m", "dpsql.frontends.repl"], env=env, encoding="utf-8",
                          timeout=TIMEOUT, dimensions=(50, 160))
    child.expect("type \\\\help")
    child.expect(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)


def _run(child, line: str, *expects: str) -> None:
    child.sendline(line)
    for e in expects:
        child.expect_exact(e)
    child.expect_exact(PROMPT)


def test_session_in_a_terminal(repl):
    # a query typed over two lines: continuation prompt, then the noisy table and its status line
    repl.sendline("SELECT state, COUNT(*)")
    repl.expect_exact("analyst->")
    repl.sendline("FROM people GROUP BY state;")
    repl.expect_exact("±")
    repl.expect_exact("rho charged 0.05 (this query alone: epsilon ")   # the demo: zCDP, rho 0.05 a query
    repl.expect_exact("remaining rho 1.489 of 1.539")
    repl.expect_exact(PROMPT)

    _run(repl, "\\chart", "CA ")
    bars = [line for line in repl.before.splitlines() if "█" in line]
    assert len(bars) == 8, repl.before

    _run(repl, "\\budget", "rho_spent")
    assert "0.05" in repl.before and "zcdp" in repl.before

    _run(repl, "\\explain SELECT COUNT(*) FROM people;", "rewritten_sql")
    _run(repl, "\\budget", "rho_spent")
    assert "1.489" in repl.before and "0.05" in repl.before     # EXPLAIN charged nothing

    _run(repl, "SELECT * FROM people;", "ERROR:")
    _run(repl, "SHOW dpsql.rho;", "0.05")                         # the loop goes on

    repl.sendeof()
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0


def test_tab_completion_and_ctrl_c(repl):
    repl.send("SELECT COUNT(*) FROM peo")
    repl.send("\t")
    esc = r"(\x1b\[[0-9;?]*[A-Za-z])*"
    repl.expect(f"p{esc}l{esc}e")       # the completed rest of the word, however the terminal draws it
    repl.sendline(";")                  # and the query runs: `FROM peo` would be refused
    repl.expect_exact("remaining rho 1.489")
    repl.expect_exact(PROMPT)

    repl.send("SELECT garbage")
    repl.sendintr()                                              # Ctrl-C clears the line
    repl.expect_exact(PROMPT)
    _run(repl, "\\budget", "rho_spent")
    assert "Traceback" not in repl.before

    repl.sendeof()
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0


def test_psql_habits_in_a_terminal(repl):
    repl.send("SELECT COUNT(*) FROM people WHERE incom")     # that table's column, not a keyword
    repl.send("\t")
    esc = r"(\x1b\[[0-9;?]*[A-Za-z])*"
    repl.expect(f"m{esc}e")                                  # the completed rest: income
    repl.sendline(" > 0;")
    repl.expect_exact("rho charged")
    repl.expect_exact(PROMPT)
    _run(repl, "\\d people", "privacy unit")
    _run(repl, "SHOW TABLES;", "protected table")
    _run(repl, "\\x", "Expanded display is on.")
    repl.sendline("quit")                                    # as psql 11+
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0
