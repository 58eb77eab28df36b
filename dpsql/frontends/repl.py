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
from collections.abc import Callable, Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.lexers import PygmentsLexer
from prompt_toolkit.output.defaults import create_output
from pygments.lexers.sql import SqlLexer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dpsql import errors
from dpsql.frontends.commands import Shell
from dpsql.frontends.meta import META, Meta, is_meta_line, parse_meta
from dpsql.frontends.render import caret, format_value, render_expanded, render_table
from dpsql.result import Result
from dpsql.session import Session
from dpsql.sqltext import only_comments, split_statements

__all__ = ["META", "Meta", "candidates", "completion_words", "is_complete", "parse_meta", "run"]

KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "COUNT", "SUM", "AVG", "AND",
    "OR", "NOT", "IN", "BETWEEN", "LIKE", "IS", "NULL", "AS", "DESC", "ASC", "EXPLAIN", "DP", "SET",
    "SHOW", "RESET", "DISTINCT", "OFFSET", "JOIN", "ON", "TABLES", "DESCRIBE",
)
SETTINGS = ("dpsql.epsilon", "dpsql.rho", "dpsql.delta", "dpsql.mechanism", "dpsql.budget", "dpsql.analyst",
            "dpsql.plan_queries", "dpsql.accountant")


# -- pure helpers (unit-tested without a terminal) --------------------------------------

def is_complete(text: str) -> bool:
    """Whether Enter should run the buffer: a meta-command, a blank line, or SQL that ends
    with ';' outside quotes and comments."""
    stripped = text.strip()
    if not stripped or is_meta_line(stripped):
        return True
    statements, rest = split_statements(text)
    return bool(statements) and only_comments(rest)


def completion_words(session: Session) -> tuple[list[str], list[str]]:
    """(tables, columns) the policy declares: each table and its privacy unit and columns."""
    tables, columns = [], []
    for name, cols in completion_schema(session).items():
        if name in session.policy.tables:
            tables.append(name)
            columns += [c for c in cols if c not in columns]
    return tables, columns


def completion_schema(session: Session) -> dict[str, list[str]]:
    """Each table an analyst may name -> the columns a query may use: a protected table's unit,
    link and declared columns; a public table's columns (names from the policy and schema only)."""
    out: dict[str, list[str]] = {}
    for name, table in session.policy.tables.items():
        cols = [table.privacy_unit] if table.privacy_unit else [table.link.column]
        out[name] = cols + [c for c in table.columns if c not in cols]
    for name, cols in session.tables().items():
        out.setdefault(name, list(cols))
    return out


_WORD = re.compile(r"[\w.\\]*$")
_CONTEXT = re.compile(r"\b(FROM|JOIN|DESCRIBE|DESC|SELECT|WHERE|BY|HAVING|ON|AND|OR|NOT|SET|SHOW|RESET)\b"
                      r"|^\s*\\d\b|^\s*\.schema\b", re.IGNORECASE)
_TABLE_CONTEXT = {"FROM", "JOIN", "DESCRIBE", "DESC", "\\D", ".SCHEMA"}
_COLUMN_CONTEXT = {"SELECT", "WHERE", "BY", "HAVING", "ON", "AND", "OR", "NOT"}
_FROM_TABLES = re.compile(r"\b(?:FROM|JOIN)\s+([\w.]+)|,\s*([\w.]+)", re.IGNORECASE)
_STRING = re.compile(r"'(?:[^']|'')*'?")


def _context(head: str) -> tuple[str | None, str]:
    """The keyword that decides what the word at the cursor is (FROM, SELECT, ...), and the text
    between that keyword and the word."""
    last = None
    for m in _CONTEXT.finditer(_STRING.sub("''", head)):
        last = m
    if last is None:
        return None, ""
    kw = last.group(1) or last.group(0).strip()
    return kw.upper(), _STRING.sub("''", head)[last.end():]


def _named_tables(text: str, schema: dict[str, list[str]]) -> list[str]:
    """The known tables a statement's FROM and JOIN name."""
    out = []
    tail = re.split(r"\bFROM\b", text, maxsplit=1, flags=re.IGNORECASE)
    if len(tail) < 2:
        return out
    for m in _FROM_TABLES.finditer("FROM " + tail[1]):
        name = (m.group(1) or m.group(2) or "").lower().rsplit(".", 1)[-1]
        if name in schema and name not in out:
            out.append(name)
    return out


def candidates(text_before_cursor: str, tables: Iterable[str], columns: Iterable[str], *,
               schema: dict[str, list[str]] | None = None, text: str | None = None) -> list[str]:
    """What Tab offers for the word before the cursor. With `schema` (table -> columns) it is
    context-aware: tables after FROM, JOIN, DESCRIBE and \\d; after SELECT, WHERE, GROUP BY,
    HAVING, ON, the columns of the tables the statement names (`text`: the whole buffer, whose
    FROM may come after the cursor), then keywords."""
    word = _WORD.search(text_before_cursor).group()
    head = text_before_cursor[: len(text_before_cursor) - len(word)]
    if word.startswith("\\"):
        if head.strip():
            return []
        prefix = word[1:].lower()
        return ["\\" + m for m in META if m.startswith(prefix)]
    low = word.lower()
    names: list[str] = [*tables, *columns]
    keywords, on_empty = True, False      # on_empty: Tab on no word lists the names
    if schema is not None:
        kw, between = _context(head)
        if kw in _TABLE_CONTEXT:
            if between.strip() and not between.rstrip().endswith(","):
                names = []                                    # FROM people <here>: a keyword
            else:
                names, keywords, on_empty = list(schema), False, True
        elif kw in _COLUMN_CONTEXT:
            named = _named_tables(text if text is not None else text_before_cursor, schema)
            names = list(dict.fromkeys(c for t in (named or schema) for c in schema[t]))
            on_empty = True
    if not word:
        return names if on_empty else []
    out: list[str] = []
    for name in names:
        if name.lower().startswith(low) and name not in out:
            out.append(name)
    if not keywords:
        return out
    for kw in (*KEYWORDS, *SETTINGS):
        if kw.lower().startswith(low) and kw.lower() != low:
            cased = kw if kw.startswith("dpsql.") else (kw.lower() if word.islower() else kw.upper())
            if cased not in out:
                out.append(cased)
    return out


def _completer(session: Session):
    tables, columns = completion_words(session)
    schema = completion_schema(session)

    class SqlCompleter(Completer):
        def get_completions(self, document, complete_event):
            before = document.text_before_cursor
            word = _WORD.search(before).group()
            for cand in candidates(before, tables, columns, schema=schema, text=document.text):
                yield Completion(cand, start_position=-len(word))

    return SqlCompleter()


# -- the loop ----------------------------------------------------------------------------

class _Repl(Shell):
    interactive = True

    def __init__(self, session: Session, console, prompt: Callable[[str], str], *, ascii: bool = False):
        super().__init__(session)
        self.console, self.prompt = console, prompt
        self.ascii = ascii

    # output
    def error(self, err: BaseException, sql: str | None = None) -> None:
        if isinstance(err, errors.Error):
            self.console.print(Text(f"ERROR: {err} [{err.sqlstate}]", style="bold red"))
            if (pointer := caret(sql or "", err.position)) is not None:
                self.console.print(Text(pointer))
            if getattr(err, "hint", None):
                self.console.print(Text(f"HINT: {err.hint}", style="yellow"))
        else:
            self.console.print(Text(f"internal error: {type(err).__name__}: {err}", style="bold red"))

    def info(self, text: str, style: str = "dim") -> None:
        self.console.print(Text(text, style=style))

    def write_raw(self, text: str) -> None:
        if self.output is not None:
            self.output.write(text)
            self.output.flush()
        else:
            self.console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)

    def width(self) -> int:
        return max(30, self.console.width - 1)

    def show(self, result: Result) -> None:
        if self.output is not None:                   # \o FILE: results as text, messages here
            if result.columns or result.kind not in ("set", "empty"):
                self.output.write(self.text_of(result) + "\n\n")
                self.output.flush()
        elif result.kind == "explain" and not self.ascii:
            self.console.print(_expanded(result))
        elif result.columns and (self.expanded or self.ascii or result.kind == "explain"):
            self.console.print(Text(render_expanded(result) if self.expanded or result.kind == "explain"
                                    else render_table(result, self.border)))
        elif result.columns:
            self.console.print(rich_table(result, self.border))
            n = len(result.rows)
            if result.kind in ("private", "public"):
                self.info(f"({n} row{'s' if n != 1 else ''})")
        if result.kind == "private":
            self.last_private = result
            self.info(result.status, style="cyan")
        elif not result.columns and result.tag:
            self.info(result.tag)

    # running
    def run_sql(self, sql: str) -> Result | None:
        """Run one statement in a worker thread so Ctrl-C can cancel it."""
        box: dict[str, object] = {}

        def work() -> None:
            try:
                box["result"] = self.session.execute(sql)
            except BaseException as err:  # noqa: BLE001 - reported by the loop
                box["error"] = err

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
        if "error" in box:
            self.error(box["error"], sql)  # type: ignore[arg-type]
            return None
        result = box["result"]  # type: ignore[assignment]
        self.show(result)
        return result

    execute = run_sql

    def banner(self) -> None:
        s = self.session
        db = getattr(s.engine, "name", None) or type(s.engine).__name__
        try:
            sp = s.spending()
            if sp.accountant == "zcdp":
                left = (f"remaining rho {sp.rho_remaining:.4g} of {sp.rho_total:.4g} "
                        f"(epsilon {sp.epsilon_spent:.3g} of {sp.epsilon_total:g} spent at delta {sp.delta_total:g})")
            else:
                left = f"remaining epsilon {sp.epsilon_remaining:g}, delta {sp.delta_remaining:g}"
        except errors.Error as err:
            left = f"budget unknown ({err})"
        self.info(f"dpsql: database {db}, policy {s.policy.source}, analyst {s.analyst}; {left}. "
                  "type \\help for help.", style="bold")

    def loop(self) -> int:
        self.banner()
        try:
            while True:
                try:
                    text = self.prompt(f"{self.session.analyst}=> ")
                except KeyboardInterrupt:
                    continue
                except EOFError:
                    return 0
                if not self.handle(text):
                    return 0
        finally:
            self.close()

    def handle(self, text: str) -> bool:
        """Run everything in one accepted buffer; False to quit."""
        try:
            stripped = text.strip()
            if is_meta_line(stripped):
                return self.meta(stripped)
            statements, rest = split_statements(text)
            if not only_comments(rest):
                statements.append(rest.strip())
            for stmt in statements:
                self.statement(stmt)
        except Exception as err:  # noqa: BLE001 - the loop goes on
            self.error(err)
        return True


def rich_table(result: Result, border: int = 1):
    """A rich Table for terminals: numbers right-aligned, noisy values as `1204 ±27`; border 0
    (rules under the header only), 1 (and between columns: the default) or 2 (and a frame)."""
    table = Table(show_header=True, header_style="bold", show_edge=border == 2, pad_edge=border == 2,
                  box=box.SIMPLE_HEAD if border == 0 else box.HEAVY_HEAD)
    numeric = [t == "number" for t in result.types] or [False] * len(result.columns)
    for i, name in enumerate(result.columns):
        table.add_column(Text(name), justify="right" if numeric[i] else "left", no_wrap=(i == 0))
    for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows)):
        table.add_row(*[Text(format_value(v, hw)) for v, hw in zip(row, widths or (None,) * len(row))])
    return table


def _expanded(result: Result):
    """One block per row, one line per non-NULL field (like psql's \\x): for wide results
    such as EXPLAIN DP, whose detail column is long text."""
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


def run(session: Session, *, history: pathlib.Path | None = None, input=None, output=None,
        ascii: bool = False) -> int:
    """The interactive loop on a terminal; returns the exit status. ascii: tables drawn with
    ASCII characters only (as `\\pset linestyle ascii`).

    `input` is a prompt_toolkit Input (default: the terminal); `output` a text stream
    (default: stdout) that both the prompt and the results are written to.
    """
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
    return _Repl(session, console, prompt_session.prompt, ascii=ascii).loop()


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
