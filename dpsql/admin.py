"""Admin tools beside the Session: every analyst's spending, a policy check, the data directory.

None of them opens a Session or charges anything; `dpsql budget` and `dpsql policy check` use them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsql import demo
from dpsql.analysis.analyze import check_policy_types
from dpsql.engines import Engine, open_engine, path_sources
from dpsql.errors import Error, PolicyError
from dpsql.ledger import Ledger, Spending
from dpsql.policy import Policy, load_policy, locate, policy_problems
from dpsql.sources import ledger_path, read_schema


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
    warnings: tuple[str, ...] = ()        # not errors, but a data owner should read them

    @property
    def ok(self) -> bool:
        return not self.problems


def data_dir() -> Path:
    """dpsql's data directory: $DPSQL_HOME, else $XDG_DATA_HOME/dpsql, else ~/.local/share/dpsql."""
    return demo.data_dir()


def spending_report(policy: Any) -> list[AnalystSpending]:
    """Every analyst's spending in the policy's ledger, sorted by name (an admin view; no database).

    A ledger file that does not exist yet means nobody has spent anything: the report is empty
    and no file is created.
    """
    pol = load_policy(policy)
    path = ledger_path(pol)
    if not Path(path).exists():
        return []
    with Ledger(path) as ledger:
        out = []
        for a in ledger.analysts():
            b = pol.budget_for(a)
            out.append(AnalystSpending(ledger.spending(a, epsilon_total=b.epsilon, delta_total=b.delta,
                                                       accountant=b.accountant), len(ledger.charges(a))))
        return out


def check_policy(path: str | os.PathLike, database: Any = None, **engine_options: Any) -> PolicyCheck:
    """Validate a policy file; with `database`, also check it against that database's tables,
    columns and types. Opens no Session and touches no ledger. Problems name the file and,
    where the key is found in the file, its line."""
    source = os.fspath(path)
    pol, found = policy_problems(source)
    if pol is None:
        return PolicyCheck(source, (), tuple(str(err) for err in found))
    text = pol.text or ""
    problems: list[str] = []
    warnings: list[str] = []
    if pol.public.undeclared == "public":
        warnings.append(f"policy {pol.source}: public.undeclared: \"public\" lets every analyst read, row by "
                        "row, any table the policy does not protect, including tables created later; "
                        "list the public tables under [public] tables instead")
    if database is not None:
        try:
            engine = open_engine(database, sources=path_sources(pol), types=pol.file_types(), **engine_options)
        except Error as err:
            return PolicyCheck(source, tuple(pol.tables), (f"database {database}: {err}",))
        try:
            problems = _schema_problems(pol, engine)
            warnings += _public_warnings(pol, engine)
            warnings += _unused_types(pol, engine)
        except Error as err:
            problems = [str(err)]
        finally:
            engine.close()
    return PolicyCheck(source, tuple(pol.tables), tuple(_with_line(p, pol.source, text) for p in problems),
                       tuple(_with_line(w, pol.source, text) for w in warnings))


def _unused_types(pol: Policy, engine: Engine) -> list[str]:
    """Declared types of tables the engine did not read from a file: the database's own apply."""
    files = getattr(engine, "files", frozenset())
    out = []
    for t in pol.tables.values():
        if t.types is not None and (t.source or t.name) not in files:
            out.append(f"policy {pol.source}: tables.{t.name}.types: not used: {t.name!r} is not read from a file "
                       "here, so the database's own column types apply")
    for name in sorted(pol.public.types):
        if name not in files:
            out.append(f"policy {pol.source}: public.types.{name}: not used: {name!r} is not read from a file "
                       "here, so the database's own column types apply")
    return out


def _public_warnings(pol: Policy, engine: Engine) -> list[str]:
    """Public tables that are missing, and (for information) the tables an analyst cannot read."""
    out = []
    base = engine.base_tables()
    for name in sorted(pol.public.tables):
        if name.rsplit(".", 1)[-1] not in base:
            out.append(f"policy {pol.source}: public.tables: {name!r} is not a base table in the database")
    protected = {t.name for t in pol.tables.values()} | {
        t.source.lower().rsplit(".", 1)[-1] for t in pol.tables.values() if t.source}
    rest = sorted(base - protected)
    if pol.public.undeclared == "public":
        opened = [n for n in rest if n not in pol.public.tables]
        if opened:
            out.append(f"policy {pol.source}: public.undeclared: these tables are readable row by row only "
                       f"because of undeclared = \"public\": {', '.join(opened)}")
    else:
        refused = [n for n in rest if not pol.is_public(n)]
        if refused:
            out.append(f"policy {pol.source}: public.tables: these tables are neither protected nor public, "
                       f"so every query on them is refused: {', '.join(refused)}")
    return out


def _schema_problems(pol: Policy, engine: Engine) -> list[str]:
    """Every mismatch between the policy and the engine's schema (as a Session checks it), each
    with its line in the policy file."""
    refs = list(dict.fromkeys(t.source or t.name for t in pol.tables.values()))
    facts = engine.facts(refs)

    def columns(name: str) -> dict[str, str]:
        if name not in facts:
            raise KeyError(name)
        return dict(facts[name].columns)

    found: list[PolicyError] = []
    pol.check_schema(columns, problems=found)
    if found:
        return [str(err) for err in found]
    try:
        schema = read_schema(pol, engine, check_types=False)
    except PolicyError as err:
        return [str(err)]
    return [f"policy {pol.source}: {p}" for p in check_policy_types(pol, schema)]


_PROBLEM = re.compile(r"^policy (?P<src>.+?): (?P<key>[\w-]+(?:\.[\w-]+)*): (?P<rest>.*)$", re.DOTALL)


def _with_line(problem: str, source: str, text: str) -> str:
    """Insert 'line N: ' after the file name of a 'policy FILE: key: problem' message."""
    m = _PROBLEM.match(problem)
    if m is None or m.group("src") != source or not text:
        return problem
    line = locate(text, m.group("key"))
    if line is None:
        return problem
    return f"policy {source}: line {line}: {m.group('key')}: {m.group('rest')}"
