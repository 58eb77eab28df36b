"""Shared fixtures for the subset tests: the test policy, its schema, the checker and the grammar.

The policy protects `people` (privacy unit person_id) and declares one column of each kind
the grammar distinguishes; `name` is in the table but not declared. `staff` is a second
protected table read through `source = "staff_raw"`. The grammar's policy terminals are
filled from POLICY_TERMINALS below (the recognizer); the generator also draws the names an
analyst chooses (aliases) from CHOSEN_NAMES. The side conditions of the grammar (C1-C5 in
grammars/dpsql.lark) are checked by side_conditions() and established by repair_conditions().
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from lark import Lark

from dpsql.analysis.analyze import PublicQuery, Schema, Settings, analyze
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.plan import QueryPlan
from dpsql.policy import Policy, load_policy

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = ROOT / "grammars" / "dpsql.lark"
CORPUS = ROOT / "tests" / "corpus"

COLUMN_TYPES = {
    "people": {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR",
               "city": "VARCHAR", "household": "INTEGER", "visit_date": "DATE", "name": "VARCHAR"},
    "staff_raw": {"person_id": "BIGINT", "salary": "DOUBLE"},
}

# Grammar terminals that stand for the policy's names: the recognizer only accepts these.
POLICY_TERMINALS: dict[str, tuple[str, ...]] = {
    "TABLE": ("people",),
    "UNIT": ("person_id",),
    "NUM_COL": ("age", "income"),
    "UNBOUNDED_NUM_COL": ("household", "person_id"),
    "TEXT_COL": ("state", "city"),
    "DATE_COL": ("visit_date",),
    "KEY_COL": ("state", "city", "household", "visit_date", "age"),
}
# Names the analyst chooses (any identifier in the grammar); the generator uses these.
CHOSEN_NAMES: dict[str, tuple[str, ...]] = {
    "TABLE_ALIAS": ("p",),
    "QUALIFIER": ("people", "p"),
    "ALIAS": ("n", "total"),
    "KEY_ALIAS": ("k", "grp"),
}
TERMINALS = POLICY_TERMINALS | CHOSEN_NAMES


def policy_dict(ledger: str | Path = "unused-ledger.sqlite") -> dict[str, Any]:
    return {
        "budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": str(ledger)},
        "defaults": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},
        "tables": {
            "people": {
                "privacy_unit": "person_id",
                "max_rows_per_unit": 3,
                "max_groups_per_unit": 2,
                "columns": {
                    "age": {"lower": 0, "upper": 120},
                    "income": {"lower": 0, "upper": 500000},
                    "state": {"values": ["CA", "NY", "TX"]},
                    "city": {},
                    "household": {"values": [1, 2, 3, 4, 5]},
                    "visit_date": {},
                },
            },
            "staff": {
                "privacy_unit": "person_id",
                "source": "staff_raw",
                "columns": {"salary": {"lower": 0, "upper": 300000}},
            },
        },
    }


POLICY: Policy = load_policy(policy_dict())
SCHEMA = Schema(columns={"people": COLUMN_TYPES["people"], "staff": COLUMN_TYPES["staff_raw"]},
                unique_units=frozenset(), base_tables=frozenset({"people", "staff_raw"}),
                views=frozenset({"people_view"}))
SETTINGS = Settings(epsilon=1.0, delta=1e-6, mechanism="laplace")


def check(text: str) -> QueryPlan | PublicQuery | Statement:
    """The query checker: classify + analyze. Raises QueryRejected (or SqlSyntaxError).

    dpsql commands (SET/SHOW/RESET) are returned as their Statement: the session handles them.
    """
    stmt = classify(text, None, "duckdb")
    if stmt.kind in ("query", "explain"):
        return analyze(stmt.tree, POLICY, SCHEMA, SETTINGS, "duckdb")
    return stmt


def grammar_for(terminals: dict[str, tuple[str, ...]] = POLICY_TERMINALS) -> str:
    """The grammar with its policy terminals replaced by the given names (whole words)."""
    text = GRAMMAR.read_text(encoding="utf-8")
    lines = [text, ""]
    for name, values in terminals.items():
        words = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
        lines.append(f"%override {name}: /\\b(?:{words})\\b/i")
    return "\n".join(lines) + "\n"


def sql_parser() -> Lark:
    """The subset recognizer for the test policy (Earley; `start` for queries, `aggregate`
    for one aggregate call)."""
    return Lark(grammar_for(), parser="earley", lexer="dynamic", start=["start", "aggregate"],
                propagate_positions=True)


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def parser() -> Lark:
    return sql_parser()


@pytest.fixture(scope="session")
def terminals() -> dict[str, tuple[str, ...]]:
    return TERMINALS


@pytest.fixture(scope="session")
def checker():
    return check


@pytest.fixture(scope="session")
def conditions():
    return side_conditions


@pytest.fixture(scope="session")
def repair():
    return repair_conditions


@pytest.fixture(scope="session")
def make_policy():
    return policy_dict


class _NoEngine:
    """An engine that knows the test schema and refuses to run anything."""
    dialect = "duckdb"

    def table_columns(self, table: str) -> dict[str, str]:
        return dict(COLUMN_TYPES[table.lower()])

    def unique_columns(self, table: str) -> set[str]:
        return set()

    def not_null_columns(self, table: str) -> set[str]:
        return set()

    def base_tables(self) -> set[str]:
        return set(SCHEMA.base_tables)

    def views(self) -> set[str]:
        return set(SCHEMA.views)

    def run(self, sql, params=None):
        raise AssertionError("a statement the checker should refuse reached the engine")

    def close(self) -> None:
        pass


@pytest.fixture
def engineless_session(tmp_path):
    """A Session over the test policy whose engine refuses to run: for dpsql commands (SET ...)."""
    from dpsql.ledger import Ledger
    from dpsql.session import Session
    policy = load_policy(policy_dict(tmp_path / "ledger.sqlite"))
    session = Session(_NoEngine(), policy, "a", ledger=Ledger(tmp_path / "ledger.sqlite"))
    yield session
    session.close()


def pytest_generate_tests(metafunc):
    """One test per corpus file (id = file name) for tests using `accept_case`, `reject_case`
    or `reject_file`. `reject_case` marks files with an `-- xfail:` header (known checker
    gaps) xfail(strict=True); `reject_file` does not (for tests of the files themselves)."""
    for fixture, kind, with_marks in (("accept_case", "accept", True), ("reject_case", "reject", True),
                                      ("reject_file", "reject", False)):
        if fixture in metafunc.fixturenames:
            params = []
            for fname, headers, sql in read_corpus(kind):
                marks = ([pytest.mark.xfail(strict=True, reason=headers["xfail"])]
                         if with_marks and "xfail" in headers else [])
                params.append(pytest.param((fname, headers, sql), id=fname, marks=marks))
            metafunc.parametrize(fixture, params)


# ----------------------------------------------------------------------------- corpus files

def read_corpus(kind: str) -> list[tuple[str, dict[str, str], str]]:
    """(file name, headers, SQL text) for each tests/corpus/<kind>/*.sql."""
    out = []
    for path in sorted((CORPUS / kind).glob("*.sql")):
        headers: dict[str, str] = {}
        body = []
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^--\s*(title|expect|xfail):\s*(.*?)\s*$", line)
            if m and not body:
                headers[m.group(1)] = m.group(2)
            else:
                body.append(line)
        out.append((path.name, headers, "\n".join(body).strip()))
    return out


class _Names:
    """What side conditions C1-C4 need from one parse tree of the grammar."""

    def __init__(self, tree):
        from lark import Token, Tree
        self.Token, self.Tree = Token, Tree
        self.query = next(tree.find_data("query"))
        self.frm = next(self.query.find_data("from_clause"))
        alias = self.tokens(self.frm, "TABLE_ALIAS")
        self.table = self.tokens(self.frm, "TABLE")[0].value
        self.qualifiers = {self.table.lower()} | ({_ident(alias[0].value)} if alias else set())
        self.items = [c for c in next(self.query.find_data("select_list")).children if isinstance(c, Tree)]
        self.agg_aliases = {_ident(t.value) for it in self.items if it.data == "agg_item"
                            for t in self.tokens(it, "ALIAS")}
        self.key_aliases = {_ident(t.value) for it in self.items if it.data == "key_item"
                            for t in self.tokens(it, "KEY_ALIAS")}
        self.group_clauses = list(self.query.find_data("group_clause"))
        self.parent = {}
        for node in self.query.iter_subtrees():
            for child in node.children:
                if isinstance(child, Tree):
                    self.parent[id(child)] = node

    def tokens(self, t, name=None):
        return [tok for tok in t.scan_values(lambda v: isinstance(v, self.Token))
                if name is None or tok.type == name]

    def column(self, key_ref) -> str:
        return _ident(self.tokens(key_ref)[-1].value)

    def qualified(self, key_ref) -> bool:
        return bool(self.tokens(key_ref, "QUALIFIER"))

    def ancestors(self, node):
        while id(node) in self.parent:
            node = self.parent[id(node)]
            yield node

    def in_arithmetic(self, node) -> bool:
        for a in self.ancestors(node):
            if a.data in ("post_sum", "post_product", "post_unary"):
                return True
            if a.data in ("post_test", "order_item", "having_clause", "post_and", "post_or", "post_not"):
                return False
        return False

    def post_region(self, node) -> bool:
        return any(a.data in ("having_clause", "order_clause") for a in self.ancestors(node))

    def in_group(self, node) -> bool:
        return any(a.data == "group_clause" for a in self.ancestors(node))

    def grouped(self) -> set[str]:
        """Columns in GROUP BY (positions resolved to their key items; bad positions skipped)."""
        out = set()
        for g in self.group_clauses:
            for child in g.children:
                if isinstance(child, self.Token) and child.type == "ORDINAL":
                    item = self.item_at(child.value)
                    if item is not None and item.data == "key_item":
                        out.add(self.column(next(item.find_data("key_ref"))))
                elif isinstance(child, self.Tree) and child.data == "key_ref":
                    out.add(self.column(child))
        return out

    def item_at(self, text: str):
        if text.isdigit() and 1 <= int(text) <= len(self.items):
            return self.items[int(text) - 1]
        return None


def _ident(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text.lower()


def side_conditions(tree) -> str | None:
    """Check side conditions C1-C5 of grammars/dpsql.lark on a parse tree; None if all hold."""
    q = _Names(tree)
    for tok in q.tokens(q.query, "QUALIFIER"):
        if _ident(tok.value) not in q.qualifiers:
            return f"C3: the qualifier {tok.value} is neither the table nor its alias"
    for g in q.group_clauses:
        for child in g.children:
            if isinstance(child, q.Token) and child.type == "ORDINAL":
                item = q.item_at(child.value)
                if item is None or item.data != "key_item":
                    return f"C4: GROUP BY {child.value} does not name a key item"
    for o in q.query.find_data("order_item"):
        first = _unplussed(o.children[0], q.Token)
        if isinstance(first, q.Token) and first.type == "NUMBER" and q.item_at(first.value) is None:
            return f"C4: ORDER BY {first.value} is not a position"
    groups = q.grouped()
    aliases = q.agg_aliases | q.key_aliases
    for ref in q.query.find_data("key_ref"):
        name = q.column(ref)
        if q.in_group(ref) or name in groups:
            continue
        if q.post_region(ref) and not q.qualified(ref) and name in aliases:
            continue                                   # the alias, not the column
        return f"C1: {name} is used but not in GROUP BY"
    for kind in ("alias_ref", "key_alias_ref"):
        for ref in q.query.find_data(kind):
            name = _ident(q.tokens(ref)[0].value)
            if q.in_arithmetic(ref):
                if name not in q.agg_aliases:
                    return f"C2: {name} in arithmetic is not an alias of an aggregate"
            elif name not in aliases and name not in groups:
                return f"C2: the alias {name} is not defined"
    for d in q.tokens(q.query, "DATE_STRING"):
        try:
            dt.date.fromisoformat(d.value.strip("'"))
        except ValueError:
            return f"C5: {d.value} is not a date"
    return None


def repair_conditions(sql: str, tree) -> str:
    """Edit a grammar string so that side conditions C1-C4 hold (C5 holds by construction).

    C3: a foreign qualifier becomes the table name. C2: an undefined alias becomes COUNT(*)
    (in arithmetic) or a string literal. C4: a bad GROUP BY position becomes a key column,
    a bad ORDER BY position becomes 1. C1: keys used but not grouped are added to GROUP BY
    (created after FROM/WHERE if missing). The result is still in the grammar.
    """
    q = _Names(tree)
    edits: list[tuple[int, int, str]] = []
    edits += [(t.start_pos, t.end_pos, q.table) for t in q.tokens(q.query, "QUALIFIER")
              if _ident(t.value) not in q.qualifiers]
    aliases = q.agg_aliases | q.key_aliases
    for kind in ("alias_ref", "key_alias_ref"):
        for ref in q.query.find_data(kind):
            tok = q.tokens(ref)[0]
            name = _ident(tok.value)
            if q.in_arithmetic(ref) and name not in q.agg_aliases:
                edits.append((tok.start_pos, tok.end_pos, "COUNT(*)"))
            elif not q.in_arithmetic(ref) and name not in aliases and name not in q.grouped():
                edits.append((tok.start_pos, tok.end_pos, "'x'"))
    for o in q.query.find_data("order_item"):
        first = _unplussed(o.children[0], q.Token)
        if isinstance(first, q.Token) and first.type == "NUMBER" and q.item_at(first.value) is None:
            edits.append((first.start_pos, first.end_pos, "1"))
    groups = q.grouped()
    fallback = POLICY_TERMINALS["KEY_COL"][0]
    for g in q.group_clauses:
        for child in g.children:
            if isinstance(child, q.Token) and child.type == "ORDINAL":
                item = q.item_at(child.value)
                if item is None or item.data != "key_item":
                    edits.append((child.start_pos, child.end_pos, fallback))
                    groups.add(fallback)
    missing = set()
    for ref in q.query.find_data("key_ref"):
        name = q.column(ref)
        if q.in_group(ref) or name in groups:
            continue
        if q.post_region(ref) and not q.qualified(ref) and name in aliases:
            continue
        missing.add(name)
    if missing:
        names = " , ".join(sorted(missing))
        if q.group_clauses:
            end = q.group_clauses[0].meta.end_pos
            edits.append((end, end, " , " + names))
        else:
            where = list(q.query.find_data("where_clause"))
            end = (where[0] if where else q.frm).meta.end_pos
            edits.append((end, end, " GROUP BY " + names + " "))
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def _unplussed(node, token_type):
    """An ORDER BY item without leading unary plus signs: `+ 1` is still the position 1."""
    while (not isinstance(node, token_type) and node.data == "post_unary"
           and isinstance(node.children[0], token_type) and node.children[0].value == "+"):
        node = node.children[1]
    return node
