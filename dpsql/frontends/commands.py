"""The shell shared by the interactive prompt (repl.py) and script mode (script.py): its state,
the dispatch of meta-commands, and the commands themselves.

psql's habits: \\d, \\d NAME, \\dt, \\x, \\o FILE, \\i FILE, \\e, \\copy (QUERY) TO FILE, \\pset,
`help`, `quit` and `exit` alone on a line; DuckDB's: SHOW TABLES, DESCRIBE t, .tables, .schema.
The catalog commands are answered from the policy and the schema dpsql read at connect: table
and column names, SQL types and the policy's own declarations (units, bounds, public value lists),
never a row, a count or a statistic. The command table and the parsing of a line are in meta.py;
the commands that read and write files (\\o, \\i, \\e, \\copy, \\g) in files.py.

A Shell is one front end's loop state; the interactive prompt and script mode subclass it with
their own output (show, info, error) and way of running a statement (run_sql).
"""
from __future__ import annotations

import re
import time
from typing import TextIO

from dpsql import errors
from dpsql.frontends.chart import bar_chart
from dpsql.frontends.files import FileCommands
from dpsql.frontends.meta import (
    DOT_COMMANDS,
    HELP_SQL,
    META,
    NOT_IN_SCRIPTS,
    Meta,
    catalog_statement,
    parse_meta,
    unquote,
)
from dpsql.frontends.render import render_expanded, render_table
from dpsql.result import Result, ResultKind
from dpsql.session import Session

# -- catalog answers: names, types, the policy's declarations ----------------------------------

def _result(columns: list[str], rows: list[tuple]) -> Result:
    n = len(columns)
    return Result(columns, ["string"] * n, rows, ResultKind.SHOW, [None] * n, [(None,) * n for _ in rows],
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


# -- the shared loop state -----------------------------------------------------------------------

class Shell(FileCommands):
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
        self.write_raw(unquote(arg) + "\n")

    def do_chart(self, arg: str) -> None:
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

