"""Admin tools beside the Session: every analyst's spending, a policy check, the data directory.

None of them opens a Session or charges anything; `dpsql budget` and `dpsql policy check` use them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsql.analysis.analyze import Schema, check_policy_types
from dpsql.engines.base import Engine, open_engine
from dpsql.errors import Error, PolicyError
from dpsql.ledger import Ledger, Spending
from dpsql.policy import Policy, load_policy
from dpsql.session import _ledger_path


@dataclass(frozen=True, slots=True)
class AnalystSpending:
    """One analyst's line in the admin budget report."""
    spending: Spending
    queries: int                          # charges recorded (answered private queries)


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """What `check_policy` found: the protected tables, or the problems (each 'policy FILE: line N: ...')."""
    source: str
    tables: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def data_dir() -> Path:
    """dpsql's data directory: $DPSQL_HOME, else $XDG_DATA_HOME/dpsql, else ~/.local/share/dpsql."""
    from dpsql.demo import data_dir as _data_dir
    return _data_dir()


def spending_report(policy: Any) -> list[AnalystSpending]:
    """Every analyst's spending in the policy's ledger, sorted by name (an admin view; no database).

    A ledger file that does not exist yet means nobody has spent anything: the report is empty
    and no file is created.
    """
    pol = load_policy(policy)
    path = _ledger_path(pol)
    if not Path(path).exists():
        return []
    with Ledger(path) as ledger:
        return [AnalystSpending(ledger.spending(a, epsilon_total=pol.budget_for(a).epsilon,
                                                delta_total=pol.budget_for(a).delta),
                                len(ledger.charges(a)))
                for a in ledger.analysts()]


def check_policy(path: str | os.PathLike, database: Any = None, **engine_options: Any) -> PolicyCheck:
    """Validate a policy file; with `database`, also check it against that database's tables,
    columns and types. Opens no Session and touches no ledger. Problems name the file and,
    where the key is found in the file, its line."""
    source = os.fspath(path)
    try:
        pol = load_policy(source)
    except PolicyError as err:
        return PolicyCheck(source, (), (str(err),))
    try:
        text = Path(source).read_text(encoding="utf-8")
    except OSError:
        text = ""
    problems: list[str] = []
    if database is not None:
        try:
            engine = open_engine(database, **engine_options)
        except Error as err:
            return PolicyCheck(source, tuple(pol.tables), (f"database {database}: {err}",))
        try:
            problems = _schema_problems(pol, engine)
        except Error as err:
            problems = [str(err)]
        finally:
            engine.close()
    return PolicyCheck(source, tuple(pol.tables), tuple(_with_line(p, pol.source, text) for p in problems))


def _schema_problems(pol: Policy, engine: Engine) -> list[str]:
    """Every mismatch between the policy and the engine's schema (as Session._read_schema checks)."""
    try:
        pol.check_schema(engine.table_columns)
    except PolicyError as err:
        return [str(err)]
    cols, unique, not_null = {}, set(), set()
    for t in pol.tables.values():
        name = t.source or t.name
        cols[t.name] = engine.table_columns(name)
        if t.privacy_unit in engine.unique_columns(name):
            unique.add(t.name)
        if t.privacy_unit in engine.not_null_columns(name):
            not_null.add(t.name)
    schema = Schema(cols, frozenset(unique), frozenset(engine.base_tables()), frozenset(engine.views()),
                    frozenset(not_null))
    return [f"policy {pol.source}: {p}" for p in check_policy_types(pol, schema)]


_PROBLEM = re.compile(r"^policy (?P<src>.+?): (?P<key>[\w-]+(?:\.[\w-]+)*): (?P<rest>.*)$", re.S)


def _with_line(problem: str, source: str, text: str) -> str:
    """Insert 'line N: ' after the file name of a 'policy FILE: key: problem' message."""
    from dpsql.policy import locate
    m = _PROBLEM.match(problem)
    if m is None or m.group("src") != source or not text:
        return problem
    line = locate(text, m.group("key"))
    if line is None:
        return problem
    return f"policy {source}: line {line}: {m.group('key')}: {m.group('rest')}"
