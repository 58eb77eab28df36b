"""What a policy points at: the engine's tables read and checked against the policy (read_schema,
the Schema every plan is made against), and the ledger and audit files it names."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from dpsql.analysis.analyze import Schema, check_policy_types
from dpsql.engines import Engine, TableFacts
from dpsql.errors import PolicyError
from dpsql.policy import Policy


def read_schema(policy: Policy, engine: Engine, *, check_types: bool = True) -> Schema:
    """What the engine says about the policy's tables, checked against the policy: each protected
    table's columns and types, whether its unit is unique (PRIMARY KEY/UNIQUE) and NOT NULL, the
    public tables' columns and keys, and every fact read (Schema.facts) so that each query can
    check the ones it relies on again in its own transaction (Engine.run's expect); the base
    tables and views analysts' public queries are checked against."""
    refs = {t.name: t.source or t.name for t in policy.tables.values()}
    base = engine.base_tables()
    public = sorted(n for n in base if policy.is_public(n))
    facts = engine.facts(list(dict.fromkeys(list(refs.values()) + public)))

    def columns(name: str) -> dict[str, str]:
        if name not in facts:
            raise KeyError(name)
        return dict(facts[name].columns)

    declared_file_types(policy, getattr(engine, "guessed", frozenset()), refs, public)
    policy.check_schema(columns)
    cols, unique, not_null = {}, set(), set()
    for t in policy.tables.values():
        f = facts[refs[t.name]]
        cols[t.name] = dict(f.columns)
        if t.privacy_unit in f.unique:
            unique.add(t.name)
        if t.privacy_unit in f.not_null:
            not_null.add(t.name)
    kept = {ref: facts[ref] for ref in list(refs.values()) + public if ref in facts}
    schema = Schema(cols, frozenset(unique), frozenset(base), frozenset(engine.views()), frozenset(not_null),
                    facts=kept, public={n: dict(facts[n].columns) for n in public if n in facts},
                    namespace=engine.namespace() if hasattr(engine, "namespace") else None)
    problems = check_policy_types(policy, schema) if check_types else []
    if problems:
        key, _, problem = problems[0].partition(": ")
        raise policy.problem(key, problem)       # with its line in the policy file
    return schema


def expected(schema: Schema, refs: Sequence[str], public: Sequence[str] = ()) -> dict[str, TableFacts]:
    """The schema facts a query relies on, to be checked in its own transaction: every fact
    read of each relation a private query reads (types for totality, keys for the shortcut and
    for links, NOT NULL for the unit filter), and that each table of a public query is still a
    base table (a view in its place could read a protected table row by row)."""
    out = {ref: schema.facts[ref] for ref in refs if ref in schema.facts}
    out.update((name, TableFacts("table")) for name in public if name not in out)
    return out


def declared_file_types(policy: Policy, guessed: frozenset[str], refs: Mapping[str, str],
                         public: list[str]) -> None:
    """Refuse a policy that shows an analyst a table the engine read from a file with types it
    guessed from the values: those types are read for free, so they must be the policy's
    (dpsql.filetypes argues it)."""
    why = ("is read from a file without declared column types: its types would be guessed from the values, "
           "and one person's value (52000.5, N/A) could change a type that every analyst reads for free. "
           "List each column and its type under [{key}] (`dpsql init FILE` writes them from the file)")
    for t in policy.tables.values():
        if refs[t.name] in guessed:
            raise policy.problem(f"tables.{t.name}", f"{t.name!r} " + why.format(key=f"tables.{t.name}.types"))
    for name in public:
        if name in guessed:
            raise policy.problem("public.tables",
                                 f"the public table {name!r} " + why.format(key=f"public.types.{name}"))


def audit_path(policy: Policy) -> Path:
    """The audit log: [reconstruction] audit_log, else beside the ledger (LEDGER.audit.jsonl)."""
    if policy.reconstruction.audit_log is not None:
        return policy.reconstruction.audit_log
    ledger = ledger_path(policy)
    return ledger.with_name(ledger.stem + ".audit.jsonl")


def ledger_path(policy: Policy) -> Path:
    if policy.budget.ledger is not None:
        return policy.budget.ledger
    if policy.source == "<dict>":
        raise PolicyError("policy <dict>: budget.ledger: missing: a policy given as a dict must name its ledger file")
    p = Path(policy.source)
    return p.with_name(p.stem + ".ledger.sqlite")
