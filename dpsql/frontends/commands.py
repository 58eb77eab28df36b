"""The meta-commands shared by the interactive prompt (repl.py) and script mode (script.py).

psql's habits: \\d, \\d NAME, \\dt, \\x, \\o FILE, \\i FILE, \\e, \\copy (QUERY) TO FILE, \\pset,
`help`, `quit` and `exit` alone on a line; DuckDB's: SHOW TABLES, DESCRIBE t, .tables, .schema.
The catalog commands are answered from the policy and the schema dpsql read at connect: table
and column names, SQL types and the policy's own declarations (units, bounds, public value lists),
never a row, a count or a statistic. `\\copy` writes a released (noisy) result as CSV: nothing
reaches the file that the analyst could not see on the screen.

A Shell is one front end's loop state; the interactive prompt and script mode subclass it with
their own output (show, info, error) and way of running a statement (run_sql).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from dpsql import errors
from dpsql.frontends.render import render_csv, render_expanded, render_table
from dpsql.result import Result
from dpsql.session import Session

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
MAX_INCLUDE_DEPTH = 16

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


# -- catalog answers: names, types, the policy's declarations ----------------------------------

def _result(columns: list[str], rows: list[tuple]) -> Result:
    n = len(columns)
    return Result(columns, ["string"] * n, rows, "show", [None] * n, [(None,) * n for _ in rows],
                  tag=f"SELECT {len(rows)}", db_types=["VARCHAR"] * n)


def tables_result(session: Session) -> Result:
    """Each table the analyst may name: protected (with its unit) or public."""
    rows = []
    for name in session.tables():
        t = session.policy.tables.get(name)
        if t is None:
            rows.append((name, "public table", ""))
        else:
            unit = t.privacy_unit if t.link is None else f"via {t.link.column} -> {t.link.table}.{t.link.key}"
            rows.append((name, "protected table", unit))
    return _result(["name", "type", "privacy_unit"], rows)


def declaration(col) -> str:
    """What the policy says about a declared column."""
    if col.values is not None:
        return "values: " + ", ".join(map(str, col.values))
    if getattr(col, "span", None) is not None:
        return f"bounds [{col.span[0]}, {col.span[1]}]"
    if col.lower is not None:
        return f"bounds [{col.lower:g}, {col.upper:g}]"
    return "filter only (grouping needs a noisy threshold)"


def describe_result(session: Session, name: str) -> Result:
    """NAME's columns, their SQL types, and what the policy declares about each."""
    tables = session.tables()
    key = name.strip('"').lower()
    if key not in tables:
        raise errors.ProgrammingError(f'did not find any table named "{name}"',
                                      "tables: " + ", ".join(tables) if tables else None)
    t = session.policy.tables.get(key)
    rows = []
    for col, sql_type in tables[key].items():
        if t is None:
            note = "public table: readable row by row"
        elif col == t.privacy_unit:
            note = "privacy unit"
        elif t.link is not None and col == t.link.column:
            note = f"link to {t.link.table}.{t.link.key}"
        elif col in t.columns:
            note = declaration(t.columns[col])
        else:
            note = "not declared: no query may use it"
        rows.append((col, sql_type, note))
    return _result(["column", "type", "policy"], rows)


def policy_result(session: Session) -> Result:
    rows = []
    for name, t in session.policy.tables.items():
        unit = t.privacy_unit if t.link is None else f"via {t.link.column}"
        cols = list(t.columns.values()) or [None]
        for i, c in enumerate(cols):
            head = (name, unit, str(t.max_rows_per_unit), str(t.max_groups_per_unit)) if i == 0 else ("",) * 4
            rows.append(head + ((c.name, declaration(c)) if c is not None else ("", "")))
    return _result(["table", "privacy_unit", "rows/unit", "groups/unit", "column", "bounds or domain"], rows)


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


# -- the shared loop state -----------------------------------------------------------------------

class Shell:
    """Settings and meta-commands of one front end's loop."""
    interactive = True

    def __init__(self, session: Session):
        self.session = session
        self.expanded = False
        self.border = 1
        self.ascii = False
        self.timing = False
        self.output: TextIO | None = None      # \o FILE
        self.last_private: Result | None = None
        self.last_query: str | None = None
        self.depth = 0

    # -- what subclasses provide
    def show(self, result: Result) -> None:
        raise NotImplementedError

    def info(self, text: str, style: str = "dim") -> None:
        raise NotImplementedError

    def error(self, err: BaseException) -> None:
        raise NotImplementedError

    def run_sql(self, sql: str) -> Result | None:
        raise NotImplementedError

    # -- shared
    def text_of(self, result: Result) -> str:
        """A result as plain text in the current display settings (for files and scripts)."""
        if self.expanded and result.columns:
            return render_expanded(result)
        return render_table(result, self.border)

    def statement(self, sql: str) -> Result | None:
        """One SQL statement: SHOW TABLES / DESCRIBE here, everything else through the session."""
        cat = catalog_statement(sql)
        if cat is not None:
            self.catalog(cat)
            return None
        self.last_query = sql
        started = time.perf_counter()
        result = self.run_sql(sql)
        if self.timing:
            self.info(f"Time: {(time.perf_counter() - started) * 1000:.1f} ms")
        return result

    def catalog(self, m: Meta) -> None:
        try:
            self.show(describe_result(self.session, m.arg) if m.arg else tables_result(self.session))
        except errors.Error as err:
            self.error(err)

    def meta(self, line: str) -> bool:
        """Run a meta-command; False to quit."""
        m = parse_meta(line)
        if not m.known:
            if m.name.startswith("."):
                dots = ", ".join("." + k for k, v in DOT_COMMANDS.items() if v)
                self.error(errors.ProgrammingError(f"unknown command {m.name}", f"dot-commands: {dots}; "
                                                   "type \\help for the backslash commands"))
            else:
                self.error(errors.ProgrammingError(f"unknown command \\{m.name}", "type \\help for the list"))
            return True
        if not self.interactive and m.name in NOT_IN_SCRIPTS:
            self.error(errors.NotSupportedError(f"\\{m.name} is not available in script mode: "
                                                f"{NOT_IN_SCRIPTS[m.name]}"))
            return True
        handler = getattr(self, "do_" + m.name, None)
        if handler is None:
            return True
        return handler(m.arg) is not False

    # -- the commands
    def do_q(self, arg: str) -> bool:
        return False

    def do_help(self, arg: str) -> None:
        lines = ["Meta-commands:"]
        for name, (a, text) in META.items():
            note = "  (not in scripts)" if not self.interactive and name in NOT_IN_SCRIPTS else ""
            lines.append(f"  \\{(name + ' ' + a).strip():<22} {text}{note}")
        lines.append("  .tables, .schema [NAME]   as in DuckDB's shell")
        self.write_raw("\n".join(lines) + "\n\n" + HELP_SQL + "\n")

    def do_budget(self, arg: str) -> None:
        self.run_sql("SHOW dpsql.budget")

    def do_policy(self, arg: str) -> None:
        self.show(policy_result(self.session))
        b = self.session.budget
        self.info(f"your lifetime budget: epsilon {b.epsilon:g}, delta {b.delta:g}, "
                  f"{self.session.spending().accountant} accounting")

    def do_d(self, arg: str) -> None:
        self.catalog(Meta("d", arg, True))

    def do_dt(self, arg: str) -> None:
        self.catalog(Meta("dt", "", True))

    def do_explain(self, arg: str) -> None:
        if not arg:
            self.error(errors.SqlSyntaxError("\\explain takes a query", "\\explain SELECT COUNT(*) FROM people"))
        else:
            self.run_sql("EXPLAIN DP " + arg)

    def _setting(self, name: str, arg: str, example: str) -> None:
        if not arg:
            self.run_sql(f"SHOW dpsql.{name}")
            return
        try:
            value = float(arg)
        except ValueError:
            self.error(errors.InvalidSetting(f"\\{name} takes a number, e.g. \\{name} {example}"))
            return
        self.run_sql(f"SET dpsql.{name} = {value!r}")

    def do_epsilon(self, arg: str) -> None:
        self._setting("epsilon", arg, "0.5")

    def do_rho(self, arg: str) -> None:
        self._setting("rho", arg, "0.01")

    def do_delta(self, arg: str) -> None:
        self._setting("delta", arg, "1e-7")

    def do_mechanism(self, arg: str) -> None:
        arg = arg.strip("'\"")
        if arg and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
            self.error(errors.InvalidSetting("\\mechanism takes a name: laplace, gaussian or gaussian_classic"))
        else:
            self.run_sql(f"SET dpsql.mechanism = '{arg}'" if arg else "SHOW dpsql.mechanism")

    def _on_off(self, arg: str, current: bool, what: str) -> bool | None:
        a = arg.lower()
        if not a:
            return not current
        if a in ("on", "true", "1"):
            return True
        if a in ("off", "false", "0"):
            return False
        self.error(errors.InvalidSetting(f"\\{what} takes on or off"))
        return None

    def do_x(self, arg: str) -> None:
        v = self._on_off(arg, self.expanded, "x")
        if v is not None:
            self.expanded = v
            self.info(f"Expanded display is {'on' if v else 'off'}.")

    def do_timing(self, arg: str) -> None:
        v = self._on_off(arg, self.timing, "timing")
        if v is not None:
            self.timing = v
            self.info(f"Timing is {'on' if v else 'off'}.")

    def do_pset(self, arg: str) -> None:
        option, _, value = arg.partition(" ")
        option, value = option.lower(), value.strip().strip("'").lower()
        if option == "border" and value in ("0", "1", "2"):
            self.border = int(value)
            self.info(f"Border style is {value}.")
        elif option == "linestyle" and value in ("ascii", "unicode"):
            self.ascii = value == "ascii"
            self.info(f"Line style is {value}.")
        elif option == "expanded":
            self.do_x(value)
        else:
            self.error(errors.InvalidSetting("\\pset takes border 0|1|2, linestyle ascii|unicode or expanded on|off"))

    def do_o(self, arg: str) -> None:
        if self.output is not None:
            self.output.close()
            self.output = None
        if arg:
            try:
                path = os.path.expanduser(_unquote(arg))
                self.output = open(path, "w", encoding="utf-8")  # noqa: SIM115 - open until \\o or the end
            except OSError as err:
                self.error(errors.InterfaceError(f"\\o: cannot write {arg}: {err.strerror}"))

    def do_i(self, arg: str) -> bool:
        from dpsql.frontends.script import split_script

        if not arg:
            self.error(errors.SqlSyntaxError("\\i takes a file name"))
            return True
        if self.depth >= MAX_INCLUDE_DEPTH:
            self.error(errors.InterfaceError(f"\\i: more than {MAX_INCLUDE_DEPTH} nested files"))
            return True
        try:
            text = Path(os.path.expanduser(_unquote(arg))).read_text(encoding="utf-8")
        except OSError as err:
            self.error(errors.InterfaceError(f"\\i: cannot read {arg}: {err.strerror}"))
            return True
        self.depth += 1
        try:
            for stmt in split_script(text):
                if stmt.meta:
                    if not self.meta(stmt.text):
                        return False
                else:
                    self.statement(stmt.text)
        finally:
            self.depth -= 1
        return True

    def do_e(self, arg: str) -> None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False, encoding="utf-8") as f:
            f.write((self.last_query or "").rstrip().rstrip(";") + (";\n" if self.last_query else ""))
            path = f.name
        try:
            try:
                subprocess.run([*shlex.split(editor), path], check=False)
            except OSError as err:
                self.error(errors.InterfaceError(f"\\e: cannot run the editor {editor!r}: {err.strerror}"))
                return
            text = Path(path).read_text(encoding="utf-8").strip()
        finally:
            os.unlink(path)
        if not text:
            return
        from dpsql.sqltext import split_statements

        statements, rest = split_statements(text)
        self.info(text, style="")
        for stmt in statements:
            self.statement(stmt)
        if rest.strip():
            self.last_query = rest.strip()
            self.info("not run: the edited query does not end with ';' (\\e again to finish it)")

    def do_copy(self, arg: str) -> None:
        try:
            query, dest = parse_copy(arg)
        except errors.Error as err:
            self.error(err)
            return
        try:
            result = self.session.execute(query)
        except errors.Error as err:
            self.error(err)
            return
        if result.kind == "private":
            self.last_private = result
        if not result.columns:
            self.error(errors.ProgrammingError("\\copy: the statement returned no rows to copy"))
            return
        text = render_csv(result) + "\n"
        if dest is None:
            self.write_raw(text)
        else:
            try:
                Path(dest).write_text(text, encoding="utf-8")
            except OSError as err:
                self.error(errors.InterfaceError(f"\\copy: cannot write {dest}: {err.strerror}"))
                return
        self.info(f"COPY {len(result.rows)}")
        if result.kind == "private":
            self.info(result.status, style="cyan")

    def do_g(self, arg: str) -> None:
        """psql's \\g: the last query again; \\g FILE sends its result to FILE (the screen after)."""
        if self.last_query is None:
            self.error(errors.ProgrammingError("\\g: there is no query to run yet", "type a query ending with ';'"))
            return
        if not arg:
            self.statement(self.last_query)
            return
        saved, self.output = self.output, None
        try:
            path = os.path.expanduser(_unquote(arg))
            self.output = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as err:
            self.output = saved
            self.error(errors.InterfaceError(f"\\g: cannot write {arg}: {err.strerror}"))
            return
        try:
            self.statement(self.last_query)
        finally:
            self.output.close()
            self.output = saved

    def do_watch(self, arg: str) -> None:
        self.error(errors.NotSupportedError(
            "\\watch is not available", "dpsql answers an identical repeat from its cache (it would reveal "
            "nothing new, and fresh noise each time would let the noise be averaged away), so every run would "
            "show the same numbers; run the query again after the data changes, or with another epsilon"))

    def write_raw(self, text: str) -> None:
        raise NotImplementedError

    def do_conninfo(self, arg: str) -> None:
        s = self.session
        db = getattr(s.engine, "name", None) or type(s.engine).__name__
        self.info(f'You are connected to "{db}" ({s.engine.dialect}) as analyst "{s.analyst}" under the '
                  f'policy "{s.policy.source}".', style="")

    def do_echo(self, arg: str) -> None:
        self.write_raw(_unquote(arg) + "\n")

    def do_chart(self, arg: str) -> None:
        from dpsql.frontends.chart import bar_chart

        if self.last_private is None:
            self.info("nothing to chart yet: run a private query first")
        else:
            self.write_raw(bar_chart(self.last_private, width=self.width()) + "\n")

    def width(self) -> int:
        return 80

    def close(self) -> None:
        if self.output is not None:
            self.output.close()
            self.output = None


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
