"""The interactive REPL: `dpsql repl` (or `python -m dpsql.frontends.repl` on the demo).

A statement ends with ';' outside quotes and comments; a meta-command (a line that starts
with '\\') ends at the end of its line. Ctrl-C clears the line, or cancels a running query;
Ctrl-D leaves. Front ends talk only to a Session (and the error classes).
"""
from __future__ import annotations

import pathlib
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from dpsql import errors
from dpsql.frontends.chart import bar_chart
from dpsql.frontends.render import rich_table
from dpsql.session import Result, Session
from dpsql.sqltext import only_comments, split_statements

KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "COUNT", "SUM", "AVG", "AND",
    "OR", "NOT", "IN", "BETWEEN", "LIKE", "IS", "NULL", "AS", "DESC", "ASC", "EXPLAIN", "DP", "SET",
    "SHOW", "RESET", "DISTINCT", "OFFSET",
)
SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.mechanism", "dpsql.budget", "dpsql.analyst")

# name -> (argument, help)
META = {
    "budget": ("", "what you have spent and what is left (SHOW dpsql.budget)"),
    "policy": ("", "protected tables: units, row/group limits, bounds, domains"),
    "explain": ("QUERY", "plan and cost of a query (EXPLAIN DP); charges nothing"),
    "epsilon": ("[E]", "SET dpsql.epsilon = E (without E: show it)"),
    "delta": ("[D]", "SET dpsql.delta = D (without D: show it)"),
    "mechanism": ("[M]", "SET dpsql.mechanism = 'M': laplace, gaussian, ..."),
    "timing": ("", "toggle printing how long each statement took"),
    "chart": ("", "bar chart of the last private result, with 95% intervals"),
    "help": ("", "this help"),
    "q": ("", "quit (or Ctrl-D)"),
}
_ALIASES = {"quit": "q", "exit": "q", "h": "help", "?": "help"}

_HELP_SQL = """\
SQL: aggregate queries over the protected tables, ending with ';', e.g.
  SELECT state, COUNT(*) FROM people GROUP BY state;
  SELECT AVG(income) FROM people WHERE age BETWEEN 30 AND 40;
  EXPLAIN DP SELECT ...;           plan and cost, charges nothing
  SET dpsql.epsilon = 0.5;         also dpsql.delta, dpsql.mechanism
  SHOW dpsql.budget;               also epsilon, delta, mechanism, analyst
  RESET dpsql.epsilon;             or RESET ALL
Keys: Tab completes; Ctrl-C clears the line or cancels a query; Ctrl-D quits."""


# -- pure helpers (unit-tested without a terminal) --------------------------------------

def is_complete(text: str) -> bool:
    """Whether Enter should run the buffer: a meta-command, a blank line, or SQL that ends
    with ';' outside quotes and comments."""
    stripped = text.strip()
    if not stripped or stripped.startswith("\\"):
        return True
    statements, rest = split_statements(text)
    return bool(statements) and only_comments(rest)


@dataclass(frozen=True)
class Meta:
    name: str        # canonical name ("q" for \q, \quit); unknown names as typed
    arg: str
    known: bool


def parse_meta(line: str) -> Meta:
    """`\\epsilon 0.5;` -> Meta("epsilon", "0.5", True)."""
    body = line.strip()
    if body.startswith("\\"):
        body = body[1:]
    name, _, arg = body.partition(" ")
    name = name.strip().rstrip(";").lower()
    name = _ALIASES.get(name, name)
    arg = arg.strip()
    if name != "explain":
        arg = arg.rstrip(";").strip()
    return Meta(name, arg, name in META)


def completion_words(session: Session) -> tuple[list[str], list[str]]:
    """(tables, columns) the policy declares: each table and its privacy unit and columns."""
    tables, columns = [], []
    for name, table in session.policy.tables.items():
        tables.append(name)
        for col in (table.privacy_unit, *table.columns):
            if col not in columns:
                columns.append(col)
    return tables, columns


_WORD = re.compile(r"[\w.\\]*$")


def candidates(text_before_cursor: str, tables: Iterable[str], columns: Iterable[str]) -> list[str]:
    """What Tab offers for the word before the cursor."""
    word = _WORD.search(text_before_cursor).group()
    head = text_before_cursor[: len(text_before_cursor) - len(word)]
    if word.startswith("\\"):
        if head.strip():
            return []
        prefix = word[1:].lower()
        return ["\\" + m for m in META if m.startswith(prefix)]
    if not word:
        return []
    low = word.lower()
    out: list[str] = []
    for name in (*tables, *columns):
        if name.lower().startswith(low) and name not in out:
            out.append(name)
    for kw in (*KEYWORDS, *SETTINGS):
        if kw.lower().startswith(low) and kw.lower() != low:
            cased = kw if kw.startswith("dpsql.") else (kw.lower() if word.islower() else kw.upper())
            if cased not in out:
                out.append(cased)
    return out


def _completer(session: Session):
    from prompt_toolkit.completion import Completer, Completion

    tables, columns = completion_words(session)

    class SqlCompleter(Completer):
        def get_completions(self, document, complete_event):
            before = document.text_before_cursor
            word = _WORD.search(before).group()
            for cand in candidates(before, tables, columns):
                yield Completion(cand, start_position=-len(word))

    return SqlCompleter()


# -- the loop ----------------------------------------------------------------------------

class _Repl:
    def __init__(self, session: Session, console, prompt: Callable[[str], str]):
        self.session, self.console, self.prompt = session, console, prompt
        self.timing = False
        self.last_private: Result | None = None

    # output
    def error(self, err: BaseException) -> None:
        from rich.text import Text

        if isinstance(err, errors.Error):
            self.console.print(Text(f"ERROR: {err} [{err.sqlstate}]", style="bold red"))
            if getattr(err, "hint", None):
                self.console.print(Text(f"HINT: {err.hint}", style="yellow"))
        else:
            self.console.print(Text(f"internal error: {type(err).__name__}: {err}", style="bold red"))

    def info(self, text: str, style: str = "dim") -> None:
        from rich.text import Text

        self.console.print(Text(text, style=style))

    def show(self, result: Result) -> None:
        if result.kind == "explain":
            self.console.print(_expanded(result))
        elif result.columns:
            self.console.print(rich_table(result))
            n = len(result.rows)
            if result.kind in ("private", "public"):
                self.info(f"({n} row{'s' if n != 1 else ''})")
        if result.kind == "private":
            self.last_private = result
            self.info(result.status, style="cyan")
        elif not result.columns and result.tag:
            self.info(result.tag)

    # running
    def execute(self, sql: str) -> Result | None:
        """Run one statement in a worker thread so Ctrl-C can cancel it."""
        box: dict[str, object] = {}

        def work() -> None:
            try:
                box["result"] = self.session.execute(sql)
            except BaseException as err:  # noqa: BLE001 - reported by the loop
                box["error"] = err

        started = time.perf_counter()
        worker = threading.Thread(target=work, name="dpsql-query", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.05)
        except KeyboardInterrupt:
            self.session.cancel()
            worker.join(5)
            self.info("query cancelled", style="yellow")
            return None
        elapsed = time.perf_counter() - started
        if "error" in box:
            self.error(box["error"])  # type: ignore[arg-type]
            result = None
        else:
            result = box["result"]  # type: ignore[assignment]
            self.show(result)
        if self.timing:
            self.info(f"Time: {elapsed * 1000:.1f} ms")
        return result

    def meta(self, line: str) -> bool:
        """Run a meta-command; False to quit."""
        m = parse_meta(line)
        if not m.known:
            self.info(f"unknown command \\{m.name}; type \\help for the list", style="red")
        elif m.name == "q":
            return False
        elif m.name == "help":
            self.help()
        elif m.name == "budget":
            self.execute("SHOW dpsql.budget")
        elif m.name == "policy":
            self.policy()
        elif m.name == "explain":
            if not m.arg:
                self.info("usage: \\explain QUERY", style="red")
            else:
                self.execute("EXPLAIN DP " + m.arg)
        elif m.name in ("epsilon", "delta"):
            self.execute(f"SET dpsql.{m.name} = {m.arg}" if m.arg else f"SHOW dpsql.{m.name}")
        elif m.name == "mechanism":
            arg = m.arg.strip("'\"")
            if arg and not re.fullmatch(r"[\w-]+", arg):
                self.info("usage: \\mechanism laplace|gaussian|...", style="red")
            else:
                self.execute(f"SET dpsql.mechanism = '{arg}'" if arg else "SHOW dpsql.mechanism")
        elif m.name == "timing":
            self.timing = not self.timing
            self.info(f"Timing is {'on' if self.timing else 'off'}.")
        elif m.name == "chart":
            if self.last_private is None:
                self.info("nothing to chart yet: run a private query first")
            else:
                self.console.print(bar_chart(self.last_private, width=max(30, self.console.width - 1)),
                                   markup=False, highlight=False, soft_wrap=True)
        return True

    def help(self) -> None:
        from rich.text import Text

        lines = ["Meta-commands:"]
        for name, (arg, text) in META.items():
            lines.append(f"  \\{(name + ' ' + arg).strip():<14} {text}")
        self.console.print(Text("\n".join(lines) + "\n\n" + _HELP_SQL))

    def policy(self) -> None:
        from rich.table import Table
        from rich.text import Text

        table = Table(show_edge=False, pad_edge=False, header_style="bold")
        for col in ("table", "privacy unit", "rows/unit", "groups/unit", "column", "bounds or domain"):
            table.add_column(col, justify="right" if col.endswith("/unit") else "left")
        for name, t in self.session.policy.tables.items():
            first = True
            cols = list(t.columns.values()) or [None]
            for c in cols:
                head = (name, t.privacy_unit, str(t.max_rows_per_unit), str(t.max_groups_per_unit)) if first \
                    else ("", "", "", "")
                first = False
                table.add_row(*map(Text, head + ((c.name, _describe(c)) if c is not None else ("", ""))))
        self.console.print(table)
        b = self.session.policy.budget
        self.info(f"lifetime budget per analyst: epsilon {b.epsilon:g}, delta {b.delta:g}")

    def banner(self) -> None:
        s = self.session
        db = getattr(s.engine, "name", None) or type(s.engine).__name__
        try:
            sp = s.spending()
            left = f"remaining epsilon {sp.epsilon_remaining:g}, delta {sp.delta_remaining:g}"
        except errors.Error as err:
            left = f"budget unknown ({err})"
        self.info(f"dpsql: database {db}, policy {s.policy.source}, analyst {s.analyst}; {left}. "
                  "type \\help for help.", style="bold")

    def loop(self) -> int:
        self.banner()
        while True:
            try:
                text = self.prompt(f"{self.session.analyst}=> ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                return 0
            if not self.handle(text):
                return 0

    def handle(self, text: str) -> bool:
        """Run everything in one accepted buffer; False to quit."""
        try:
            stripped = text.strip()
            if stripped.startswith("\\"):
                return self.meta(stripped)
            statements, rest = split_statements(text)
            if not only_comments(rest):
                statements.append(rest.strip())
            for stmt in statements:
                self.execute(stmt)
        except Exception as err:  # noqa: BLE001 - the loop goes on
            self.error(err)
        return True


def _describe(col) -> str:
    if col.values is not None:
        return "values: " + ", ".join(map(str, col.values))
    if col.lower is not None:
        return f"[{col.lower:g}, {col.upper:g}]"
    return "filter only (grouping needs a noisy threshold)"


def _expanded(result: Result):
    """One block per row, one line per non-NULL field (like psql's \\x): for wide results
    such as EXPLAIN DP, whose detail column is long text."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for row in result.rows:
        table.add_row(Text(f"-[ {row[0]} ]", style="bold cyan"), Text(""))
        for name, value in zip(result.columns[1:], row[1:]):
            if value is not None:
                table.add_row(Text(name), Text(str(value) if not isinstance(value, float) else f"{value:.6g}"))
    return table


def _key_bindings():
    from prompt_toolkit.key_binding import KeyBindings

    kb = KeyBindings()

    @kb.add("enter")
    def _(event) -> None:
        buf = event.current_buffer
        if buf.complete_state is not None and buf.complete_state.current_completion is not None:
            buf.apply_completion(buf.complete_state.current_completion)
            return
        if is_complete(buf.text):
            buf.validate_and_handle()
        else:
            buf.insert_text("\n")

    return kb


def run(session: Session, *, history: pathlib.Path | None = None, input=None, output=None) -> int:
    """The interactive loop on a terminal; returns the exit status.

    `input` is a prompt_toolkit Input (default: the terminal); `output` a text stream
    (default: stdout) that both the prompt and the results are written to.
    """
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, InMemoryHistory
    from prompt_toolkit.lexers import PygmentsLexer
    from prompt_toolkit.output.defaults import create_output
    from pygments.lexers.sql import SqlLexer
    from rich.console import Console

    stream = output if output is not None else sys.stdout
    console = Console(file=stream, highlight=False)
    if history is not None:
        history = pathlib.Path(history)
        history.parent.mkdir(parents=True, exist_ok=True)
    analyst = session.analyst
    prompt_session = PromptSession(
        history=FileHistory(str(history)) if history is not None else InMemoryHistory(),
        multiline=True,
        key_bindings=_key_bindings(),
        prompt_continuation=lambda width, line_number, soft_wrap: f"{analyst}-> ".rjust(width),
        lexer=PygmentsLexer(SqlLexer),
        completer=_completer(session),
        complete_while_typing=False,
        input=input,
        output=create_output(stdout=stream) if output is not None else None,
    )
    return _Repl(session, console, prompt_session.prompt).loop()


def main() -> int:
    """Open the bundled demo (or DPSQL_HOME's) and run the REPL on it."""
    try:
        session = Session.open(None, None, None)
    except errors.Error as err:
        print(f"ERROR: {err} [{err.sqlstate}]", file=sys.stderr)
        return 1
    with session:
        return run(session)


if __name__ == "__main__":
    raise SystemExit(main())
