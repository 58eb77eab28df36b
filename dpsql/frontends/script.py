"""Script mode: run a file of statements through one Session, as `dpsql repl < script.sql` does.

Statements end with ';' outside quotes and comments. Meta-commands stand on their own line:

    \\budget            SHOW dpsql.budget
    \\epsilon X         SET dpsql.epsilon = X
    \\delta X           SET dpsql.delta = X
    \\mechanism M       SET dpsql.mechanism = 'M'
    \\explain Q         EXPLAIN DP Q (how Q would be answered; charges nothing)
    \\q                 stop reading

Each statement's result is printed (table, CSV or JSON); an error prints
`ERROR: <message> [<sqlstate>]` (and `HINT:`) to the error stream and the script goes on
with the next statement. The exit status is 1 if any statement failed, else 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TextIO

from dpsql import errors
from dpsql.frontends.render import render_csv, render_json, render_table
from dpsql.session import Result, Session
from dpsql.sqltext import skip

META_HELP = {
    "budget": "show your spending and what is left",
    "epsilon": "set epsilon for the next queries: \\epsilon 0.5",
    "delta": "set delta for the next queries: \\delta 1e-7",
    "mechanism": "set the noise mechanism: \\mechanism laplace|gaussian|gaussian_classic",
    "explain": "show how a query would be answered, without running or charging it",
    "q": "stop",
}
_META_START = re.compile(r"[ \t]*\\")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Statement:
    """One piece of a script: SQL text (without the ';') or a meta-command line."""
    line: int          # 1-based line where it starts
    text: str
    meta: bool = False


def split_script(text: str) -> list[Statement]:
    """Split a script on ';' outside quotes and comments; meta-command lines stand alone.

    Quotes: '...' (with '' inside), "...", and $tag$...$tag$. Comments: -- to end of line and
    /* ... */. A piece holding nothing but whitespace and comments is dropped.
    """
    out: list[Statement] = []
    buf: list[str] = []
    content = False            # the current piece has something besides space and comments
    start = 1
    line = 1
    i, n = 0, len(text)

    def flush() -> None:
        nonlocal buf, content
        if content:
            out.append(Statement(start, "".join(buf).strip()))
        buf, content = [], False

    while i < n:
        ch = text[i]
        at_line_start = i == 0 or text[i - 1] == "\n"
        if not content and at_line_start and _META_START.match(text, i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            flush()
            out.append(Statement(line, text[i:end].strip(), meta=True))
            i = end
            continue
        if not content and not ch.isspace() and not text.startswith(("--", "/*"), i):
            content, start = True, line
        kind, end, _ = skip(text, i)
        if kind == "code" and ch == ";":
            flush()
        else:
            buf.append(text[i:end])
        line += text.count("\n", i, end)
        i = end
    flush()
    return out


def meta_sql(command: str) -> str | None:
    """The SQL a meta-command line stands for; None for \\q. Raises errors.Error if malformed."""
    name, _, arg = command.lstrip("\\").partition(" ")
    name, arg = name.strip().lower(), arg.strip().rstrip(";").strip()
    if name in ("q", "quit"):
        return None
    if name == "budget" and not arg:
        return "SHOW dpsql.budget"
    if name in ("epsilon", "delta"):
        try:
            value = float(arg)
        except ValueError:
            raise errors.InvalidSetting(f"\\{name} takes a number, e.g. \\{name} "
                                        f"{'0.5' if name == 'epsilon' else '1e-7'}") from None
        return f"SET dpsql.{name} = {value!r}"
    if name == "mechanism":
        if not _WORD.match(arg):
            raise errors.InvalidSetting("\\mechanism takes a name: laplace, gaussian or gaussian_classic")
        return f"SET dpsql.mechanism = '{arg}'"
    if name == "explain" and arg:
        return f"EXPLAIN DP {arg}"
    if name in META_HELP:
        raise errors.SqlSyntaxError(f"\\{name}: {META_HELP[name]}", hint="see the usage above")
    raise errors.SqlSyntaxError(f"unknown command \\{name}",
                                hint="commands: " + ", ".join(f"\\{k}" for k in META_HELP))


def format_error(err: errors.Error) -> str:
    """`ERROR: <message> [<sqlstate>]`, and `HINT: <hint>` on the next line if there is one."""
    text = f"ERROR: {err} [{err.sqlstate}]"
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


def run_script(session: Session, stream: TextIO, out: TextIO, err: TextIO, fmt: str = "table") -> int:
    """Run every statement of `stream` in `session`; print results to `out`, errors (and, in
    table format, each private result's cost line) to `err`. Return 1 if any statement failed."""
    failed = False
    first = True
    for stmt in split_script(stream.read()):
        try:
            sql = meta_sql(stmt.text) if stmt.meta else stmt.text
            if sql is None:
                break
            result = session.execute(sql)
        except errors.Error as e:
            failed = True
            err.write(format_error(e) + "\n")
            err.write(f"LINE {stmt.line}: {_first_line(stmt.text)}\n")
            err.flush()
            continue
        text = render(result, fmt)
        if text is None:
            continue
        if not first and fmt != "json":
            out.write("\n")
        first = False
        out.write(text + "\n")
        out.flush()
        if fmt == "table" and result.kind == "private":
            err.write(result.status + "\n")
            err.flush()
    return 1 if failed else 0


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 80 and "\n" not in text.strip() else first[:77] + "..."
