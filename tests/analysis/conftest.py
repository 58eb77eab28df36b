"""Shared fixtures for the subset tests: the test policy, its schema, the checker and the grammar.

The policy protects `people` (privacy unit person_id) and declares one column of each kind
the grammar distinguishes; `name` is in the table but not declared. `staff` is a second
protected table read through `source = "staff_raw"`. The grammar's policy-dependent
terminals are filled from TERMINALS below.
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
    "staff": {"person_id": "BIGINT", "salary": "DOUBLE"},
}

# Grammar terminal -> the test policy's names for it (see the header of grammars/dpsql.lark).
TERMINALS: dict[str, tuple[str, ...]] = {
    "TABLE": ("people",),
    "TABLE_ALIAS": ("p",),
    "QUALIFIER": ("people", "p"),
    "UNIT": ("person_id",),
    "NUM_COL": ("age", "income"),
    "UNBOUNDED_NUM_COL": ("household", "person_id"),
    "TEXT_COL": ("state", "city"),
    "DATE_COL": ("visit_date",),
    "KEY_COL": ("state", "city", "household", "visit_date", "age"),
    "ALIAS": ("n", "total"),
    "KEY_ALIAS": ("k", "grp"),
}


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
SCHEMA = Schema(columns={"people": COLUMN_TYPES["people"], "staff": COLUMN_TYPES["staff"]},
                unique_units=frozenset(), base_tables=frozenset({"people", "staff_raw"}),
                views=frozenset())
SETTINGS = Settings(epsilon=1.0, delta=1e-6, mechanism="laplace")


def check(text: str) -> QueryPlan | PublicQuery | Statement:
    """The query checker: classify + analyze. Raises QueryRejected (or SqlSyntaxError).

    dpsql commands (SET/SHOW/RESET) are returned as their Statement: the session handles them.
    """
    stmt = classify(text, None, "duckdb")
    if stmt.kind in ("query", "explain"):
        return analyze(stmt.tree, POLICY, SCHEMA, SETTINGS, "duckdb")
    return stmt


def grammar_for(terminals: dict[str, tuple[str, ...]] = TERMINALS) -> str:
    """The grammar with its policy terminals replaced by the given names (whole words)."""
    text = GRAMMAR.read_text(encoding="utf-8")
    lines = [text, ""]
    for name, values in terminals.items():
        words = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
        lines.append(f"%override {name}: /\\b(?:{words})\\b/i")
    return "\n".join(lines) + "\n"


_PARSER: Lark | None = None


def sql_parser() -> Lark:
    global _PARSER
    if _PARSER is None:
        _PARSER = Lark(grammar_for(), parser="earley", lexer="dynamic", start="start",
                       propagate_positions=False)
    return _PARSER


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
def make_policy():
    return policy_dict


def pytest_generate_tests(metafunc):
    """Parametrize `accept_case` / `reject_case` with the corpus files (id = file name)."""
    for kind in ("accept", "reject"):
        name = f"{kind}_case"
        if name in metafunc.fixturenames:
            params = []
            for fname, headers, sql in read_corpus(kind):
                marks = ([pytest.mark.xfail(strict=True, reason=headers["xfail"])]
                         if "xfail" in headers else [])
                params.append(pytest.param((fname, headers, sql), id=fname, marks=marks))
            metafunc.parametrize(name, params)


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


def side_conditions(tree) -> str | None:
    """Check side conditions C1-C5 of grammars/dpsql.lark on a parse tree; None if all hold."""
    from lark import Token, Tree

    def tokens(t, name=None):
        return [tok for tok in t.scan_values(lambda v: isinstance(v, Token))
                if name is None or tok.type == name]

    def col_name(col_tree) -> str:
        return tokens(col_tree)[-1].value.lower()

    query = next(tree.find_data("query"))
    frm = next(query.find_data("from_clause"))
    alias = tokens(frm, "TABLE_ALIAS")
    qualifier = (alias[0] if alias else tokens(frm, "TABLE")[0]).value.lower()
    for q in tokens(query, "QUALIFIER"):
        if q.value.lower() != qualifier:
            return f"C3: qualifier {q.value} but FROM names {qualifier}"

    items = [c for c in next(query.find_data("select_list")).children if isinstance(c, Tree)]
    aliases = {t.value.lower() for it in items if it.data == "agg_item" for t in tokens(it, "ALIAS")}
    key_aliases = {t.value.lower() for it in items if it.data == "key_item" for t in tokens(it, "KEY_ALIAS")}

    groups: set[str] = set()
    group_clauses = list(query.find_data("group_clause"))
    for g in group_clauses:
        for child in g.children:
            if isinstance(child, Token) and child.type == "ORDINAL":
                pos = int(child.value)
                if not 1 <= pos <= len(items) or items[pos - 1].data != "key_item":
                    return f"C4: GROUP BY {pos} does not name a key item"
                groups.add(col_name(next(items[pos - 1].find_data("key_ref"))))
            elif isinstance(child, Tree) and child.data == "key_ref":
                groups.add(col_name(child))
    group_refs = {id(k) for g in group_clauses for k in g.find_data("key_ref")}
    for k in query.find_data("key_ref"):
        if id(k) not in group_refs and col_name(k) not in groups:
            return f"C1: {col_name(k)} is not in GROUP BY"
    for ref in query.find_data("alias_ref"):
        if tokens(ref)[0].value.lower() not in aliases:
            return f"C2: alias {tokens(ref)[0]} is not defined"
    for ref in query.find_data("key_alias_ref"):
        if tokens(ref)[0].value.lower() not in key_aliases:
            return f"C2: alias {tokens(ref)[0]} is not defined"
    for o in query.find_data("order_item"):
        first = o.children[0]
        if isinstance(first, Token) and first.type == "NUMBER":
            if not first.value.isdigit() or not 1 <= int(first.value) <= len(items):
                return f"C4: ORDER BY {first.value} is not a position"
    for d in tokens(query, "DATE_STRING"):
        try:
            dt.date.fromisoformat(d.value.strip("'"))
        except ValueError:
            return f"C5: {d.value} is not a date"
    return None
