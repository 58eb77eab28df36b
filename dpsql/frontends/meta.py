"""The meta-command language of the shell, shared by the interactive prompt and script mode:
the table of commands (META) and their aliases, parsing a meta-command line, recognising the
catalog statements SHOW TABLES and DESCRIBE t, parsing `\\copy (QUERY) TO FILE`, and splitting a
script into statements and meta-command lines. Pure text functions: no session, no output.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dpsql import errors
from dpsql.sqltext import skip

# name -> (argument, help). Every command works in both modes except those in NOT_IN_SCRIPTS.
META = {
    "budget": ("", "what you have spent and what is left (SHOW dpsql.budget)"),
    "policy": ("", "protected tables: units, row/group limits, bounds, domains"),
    "d": ("[NAME]", "without NAME: the tables; with it: NAME's columns, types and declarations"),
    "dt": ("", "the tables you may query (also SHOW TABLES; and .tables)"),
    "explain": ("QUERY", "plan and cost of a query (EXPLAIN DP); charges nothing"),
    "epsilon": ("[E]", "SET dpsql.epsilon = E (without E: show it)"),
    "rho": ("[R]", "SET dpsql.rho = R: each query costs R in zCDP (without R: show it)"),
    "delta": ("[D]", "SET dpsql.delta = D (without D: show it)"),
    "mechanism": ("[M]", "SET dpsql.mechanism = 'M': laplace, gaussian, ..."),
    "x": ("[on|off]", "expanded display: one line per column (toggles without an argument)"),
    "pset": ("OPTION [VALUE]", "border 0|1|2, linestyle ascii|unicode, expanded on|off"),
    "o": ("[FILE]", "send results to FILE (appending nothing: it is overwritten); \\o alone: back to the screen"),
    "i": ("FILE", "run the statements and meta-commands in FILE"),
    "e": ("", "edit the last query in $VISUAL or $EDITOR; it runs if it ends with ';'"),
    "copy": ("(QUERY) TO FILE", "run QUERY and write its noisy result to FILE (or STDOUT) as CSV"),
    "g": ("[FILE]", ("run the last query again (an identical repeat is answered from the cache: free); "
                     "with FILE, write its result there")),
    "watch": ("[SECONDS]", "refused: a repeated query gets the same cached answer, so there is nothing to watch"),
    "timing": ("[on|off]", "printing how long each statement took"),
    "conninfo": ("", "the database, policy and analyst of this session"),
    "echo": ("TEXT", "print TEXT (in scripts: to the output)"),
    "chart": ("", "bar chart of the last private result, with 95% intervals"),
    "help": ("", "this help (also: help)"),
    "q": ("", "quit (also: quit, exit, Ctrl-D)"),
}
ALIASES = {"quit": "q", "exit": "q", "h": "help", "?": "help", "dt+": "dt", "d+": "d", "describe": "d"}
NOT_IN_SCRIPTS = {
    "e": "\\e opens an editor on a terminal; a script is its own editor: write the query into it",
}
# DuckDB's dot-commands, where they mean the same thing
DOT_COMMANDS = {"tables": "dt", "schema": "d", "help": "help", "quit": "q", "exit": "q", "read": "i",
                "output": "o", "timer": "timing", "mode": None}
_BARE_WORDS = {"quit": "q", "exit": "q", "help": "help"}

HELP_SQL = """\
SQL: aggregate queries over the protected tables, ending with ';', e.g.
  SELECT state, COUNT(*) FROM people GROUP BY state;
  SELECT AVG(income) FROM people WHERE age BETWEEN 30 AND 40;
  EXPLAIN DP SELECT ...;           plan and cost, charges nothing
  SET dpsql.epsilon = 0.5;         also dpsql.rho, dpsql.delta, dpsql.mechanism
  SET dpsql.plan_queries = 100;    EXPLAIN DP then compares 100 such queries
  SHOW dpsql.budget;               also epsilon, rho, delta, mechanism, accountant, analyst
  RESET dpsql.epsilon;             or RESET ALL
  SHOW TABLES;  DESCRIBE people;   the tables and columns you may use (names and types only)"""


@dataclass(frozen=True)
class Meta:
    name: str        # canonical name ("q" for \q, \quit); unknown names as typed
    arg: str
    known: bool


def parse_meta(line: str) -> Meta:
    """`\\epsilon 0.5;` -> Meta("epsilon", "0.5", True); also `quit`, `help`, `.tables`, `.schema t`."""
    body = line.strip()
    bare = body.rstrip(";").strip().lower()
    if bare in _BARE_WORDS:
        return Meta(_BARE_WORDS[bare], "", True)
    if body.startswith("."):
        name, _, arg = body[1:].partition(" ")
        name = name.strip().lower()
        if DOT_COMMANDS.get(name):
            return Meta(DOT_COMMANDS[name], arg.strip().rstrip(";").strip(), True)
        return Meta("." + name, arg.strip(), False)
    body = body.removeprefix("\\")
    m = re.match(r"(\w+\+?|\?)(.*)", body, re.DOTALL)
    name, arg = (m.group(1), m.group(2)) if m else (body, "")
    name = name.strip().rstrip(";").lower()
    name = ALIASES.get(name, name)
    arg = arg.strip()
    if name not in ("explain", "copy"):
        arg = arg.rstrip(";").strip()
    return Meta(name, arg, name in META)


def is_meta_line(line: str) -> bool:
    """A line that is a meta-command by itself: `\\...`, `quit`, `exit`, `help`, `.tables`..."""
    s = line.strip()
    return s.startswith("\\") or s.rstrip(";").strip().lower() in _BARE_WORDS or bool(re.match(r"\.[a-z]", s))


_SHOW_TABLES = re.compile(r"^\s*SHOW\s+TABLES\s*;?\s*$", re.IGNORECASE)
_DESCRIBE = re.compile(r"^\s*(?:DESCRIBE|DESC)\s+(\"[^\"]+\"|[\w.]+)\s*;?\s*$", re.IGNORECASE)


def catalog_statement(sql: str) -> Meta | None:
    """SHOW TABLES and DESCRIBE t (DuckDB's), answered like \\dt and \\d t."""
    if _SHOW_TABLES.match(sql):
        return Meta("dt", "", True)
    m = _DESCRIBE.match(sql)
    if m:
        return Meta("d", m.group(1), True)
    return None


# -- \copy ---------------------------------------------------------------------------------------

_COPY = re.compile(r"^\((?P<query>.*)\)\s*TO\s+(?P<dest>'(?:[^']|'')*'|\"[^\"]*\"|\S+)\s*(?P<opts>.*?)\s*;?\s*$",
                   re.IGNORECASE | re.DOTALL)


def parse_copy(arg: str) -> tuple[str, str | None]:
    """`(SELECT ...) TO 'file' [WITH] [(FORMAT csv, HEADER)]` -> (query, file or None for STDOUT)."""
    m = _COPY.match(arg.strip())
    if m is None:
        if re.match(r"^\s*[\w.\"]+(\s*\(.*\))?\s+(TO|FROM)\b", arg, re.IGNORECASE):
            raise errors.QueryRejected("\\copy of a table", "it would copy rows; only a query's noisy result "
                                       "can be copied", "write \\copy (SELECT ... aggregate ...) TO 'file.csv'")
        raise errors.SqlSyntaxError("\\copy takes (QUERY) TO 'FILE' or (QUERY) TO STDOUT",
                                    "e.g. \\copy (SELECT state, COUNT(*) FROM people GROUP BY state) TO 'n.csv'")
    opts = re.sub(r"[(),]|\bWITH\b|\bFORMAT\b|\bCSV\b|\bHEADER\b(\s+(TRUE|ON))?", " ", m.group("opts"),
                  flags=re.IGNORECASE).strip()
    if opts:
        raise errors.SqlSyntaxError(f"\\copy writes CSV with a header; it does not take {opts!r}")
    dest = m.group("dest")
    if dest[0] == "'":
        dest = dest[1:-1].replace("''", "'")
    elif dest[0] == '"':
        dest = dest[1:-1]
    elif dest.upper() in ("STDOUT", "PSTDOUT"):
        return m.group("query"), None
    return m.group("query"), os.path.expanduser(dest)


# -- scripts ---------------------------------------------------------------------------------------

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
        if not content and at_line_start and is_meta_line(text[i:_line_end(text, i)]):
            end = _line_end(text, i)
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


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end == -1 else end


def unquote(text: str) -> str:
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
