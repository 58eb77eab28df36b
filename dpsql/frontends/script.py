"""Script mode: run a file of statements through one Session, as `dpsql repl < script.sql` does.

Statements end with ';' outside quotes and comments. Meta-commands stand on their own line and
are the interactive prompt's (dpsql.frontends.commands; parsed in dpsql.frontends.meta): \\budget, \\policy, \\d [NAME], \\dt,
\\explain Q, \\epsilon X, \\rho X, \\delta X, \\mechanism M, \\x, \\pset, \\o FILE, \\i FILE,
\\copy (Q) TO FILE, \\timing, \\chart, \\help, \\q; also `quit`, `exit` and `help` alone on a
line, DuckDB's .tables and .schema, and the statements SHOW TABLES and DESCRIBE t. Only \\e is
refused, with the reason: it opens an editor on a terminal.

Each statement's result is printed (table, CSV or JSON); an error prints
`ERROR: <message> [<sqlstate>]` (and `HINT:`) to the error stream and the script goes on
with the next statement. The exit status is 1 if any statement failed, else 0.
"""
from __future__ import annotations

from typing import TextIO

from dpsql import errors
from dpsql.frontends.commands import Shell
from dpsql.frontends.meta import Statement, split_script
from dpsql.frontends.render import caret, render_csv, render_json, render_table
from dpsql.result import Result
from dpsql.session import Session


def format_error(err: errors.Error, pointer: str | None = None) -> str:
    """`ERROR: <message> [<sqlstate>]`, then the `LINE n:` pointer with its caret when given (as
    psql prints them), and `HINT: <hint>` on the next line if there is one."""
    text = f"ERROR: {err} [{err.sqlstate}]"
    if pointer:
        text += "\n" + pointer
    if getattr(err, "hint", None):
        text += f"\nHINT: {err.hint}"
    return text


def render(result: Result, fmt: str) -> str | None:
    """A result as text in `fmt` (table, csv, json); None for a result with no rows to show
    (SET, RESET) outside table format."""
    if fmt == "csv":
        return render_csv(result) if result.columns else None
    if fmt == "json":
        return render_json(result) if result.columns else None
    return render_table(result)


class _Script(Shell):
    interactive = False

    def __init__(self, session: Session, out: TextIO, err: TextIO, fmt: str):
        super().__init__(session)
        self.out, self.err, self.fmt = out, err, fmt
        self.failed = False
        self.first = True
        self.where: Statement | None = None

    def error(self, e: BaseException) -> None:
        self.failed = True
        if not isinstance(e, errors.Error):
            e = errors.InternalError(f"internal error ({type(e).__name__})")
        where = self.where
        pointer = None if where is None or where.meta else caret(where.text, e.position, where.line)
        self.err.write(format_error(e, pointer) + "\n")
        if where is not None and pointer is None:
            self.err.write(f"LINE {where.line}: {_first_line(where.text)}\n")
        self.err.flush()

    def info(self, text: str, style: str = "dim") -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def write_raw(self, text: str) -> None:
        stream = self.output or self.out
        stream.write(text)
        stream.flush()

    def show(self, result: Result) -> None:
        if self.fmt == "table":
            text = self.text_of(result)
        else:
            text = render(result, self.fmt)
        if text is None:
            return
        stream = self.output or self.out
        if not self.first and self.fmt != "json" and stream is self.out:
            stream.write("\n")
        if stream is self.out:
            self.first = False
        stream.write(text + "\n")
        stream.flush()
        if self.fmt == "table" and result.kind == "private":
            self.info(result.status)

    def run_sql(self, sql: str) -> Result | None:
        try:
            result = self.session.execute(sql)
        except errors.Error as e:
            self.error(e)
            return None
        if result.kind == "private":
            self.last_private = result
        self.show(result)
        return result


def run_script(session: Session, stream: TextIO, out: TextIO, err: TextIO, fmt: str = "table") -> int:
    """Run every statement of `stream` in `session`; print results to `out`, errors (and, in
    table format, each private result's cost line) to `err`. Return 1 if any statement failed."""
    script = _Script(session, out, err, fmt)
    try:
        for stmt in split_script(stream.read()):
            script.where = stmt
            if stmt.meta:
                if not script.meta(stmt.text):
                    break
            else:
                script.statement(stmt.text)
    finally:
        script.close()
    return 1 if script.failed else 0


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 80 and "\n" not in text.strip() else first[:77] + "..."
