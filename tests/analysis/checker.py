"""The subset tests' model: the test policy, its schema, the checker and the grammar's side conditions.

The fixtures that hand these to the tests are in conftest.py (tests/analysis/).

The policy protects `people` (privacy unit person_id), which declares one column of each kind
the grammar distinguishes (`name` is in the table but not declared); `visits` (unit
person_id: several rows per person); `notes`, linked to visits (`link = "visit_id ->
visits.visit_id"`, the engine guarantees visits.visit_id unique); and `staff`, read through
`source = "staff_raw"`. `regions` is a public table. The grammar's table terminals are
filled from TABLE_TERMINALS below (the recognizer); its column terminals are classes of
names that depend on the FROM items in scope, so they are checked by side_conditions() (the
side conditions N1-V3 of grammars/dpsql.lark) and established by repair_conditions(), both
one walk over the parse tree (_Walk). The generator draws names from NAMES.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from fractions import Fraction
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree

from dpsql.analysis.analyze import PublicQuery, Schema, Settings, analyze
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.plan import QueryPlan
from dpsql.engines.base import TableFacts
from dpsql.policy import Policy, load_policy

from tests.analysis.row_values import SAMPLE_LIMIT, GiveUp, V, Values

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = ROOT / "grammars" / "dpsql.lark"
CORPUS = ROOT / "tests" / "corpus"

COLUMN_TYPES = {
    "people": {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR",
               "city": "VARCHAR", "household": "INTEGER", "visit_date": "DATE", "name": "VARCHAR",
               "born": "DATE", "seen": "TIMESTAMP", "logged": "TIMESTAMP"},
    "staff_raw": {"person_id": "BIGINT", "salary": "DOUBLE"},
    "visits": {"visit_id": "BIGINT", "person_id": "BIGINT", "cost": "DOUBLE", "kind": "VARCHAR",
               "clinic": "VARCHAR", "ward": "INTEGER", "visited": "DATE"},
    "notes": {"note_id": "BIGINT", "visit_id": "BIGINT", "words": "INTEGER", "topic": "VARCHAR",
              "written": "DATE"},
    "regions": {"state": "VARCHAR", "region": "VARCHAR"},
}
UNIQUE = {"visits": frozenset({"visit_id"}), "notes": frozenset({"note_id"})}
REGIONS = (("CA", "West"), ("NY", "East"), ("TX", "South"))        # the public table's rows

# The grammar's table terminals, for the recognizer: the policy's protected tables (by name
# or source) and its public tables. Every other name terminal is any identifier there.
TABLE_TERMINALS: dict[str, tuple[str, ...]] = {
    "TABLE": ("people", "visits", "notes", "staff", "staff_raw"),
    "PUBLIC_TABLE": ("regions",),
    "SCHEMA": ("main",),
    "CATALOG": ("people",),
}


def policy_dict(ledger: str | Path = "unused-ledger.sqlite", *, relational: bool = True) -> dict[str, Any]:
    """The test policy; relational=False: people and staff only (the single-table tests)."""
    out = {
        "budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": str(ledger)},
        "defaults": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},
        "timing": {"quantum": 0, "floor": 0},
        "public": {"tables": ["regions"]},
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
                    "born": {"lower": "1920-01-01", "upper": "2010-12-31"},           # date functions (X1)
                    "seen": {"lower": "2023-01-01 08:00:00", "upper": "2024-12-31"},  # a TIMESTAMP's
                    "logged": {},
                },
            },
            "staff": {
                "privacy_unit": "person_id",
                "source": "staff_raw",
                "columns": {"salary": {"lower": 0, "upper": 300000}},
            },
            "visits": {
                "privacy_unit": "person_id",
                "max_rows_per_unit": 5,
                "max_groups_per_unit": 2,
                "columns": {
                    "visit_id": {},
                    "cost": {"lower": 0, "upper": 1000},
                    "kind": {"values": ["lab", "exam", "consult"]},
                    "clinic": {},
                    "ward": {},
                    "visited": {},
                },
            },
            "notes": {
                "link": "visit_id -> visits.visit_id",
                "max_rows_per_unit": 4,
                "max_groups_per_unit": 2,
                "columns": {
                    "note_id": {},
                    "words": {"lower": 0, "upper": 500},
                    "topic": {"values": ["diet", "sleep", "pain"]},
                    "written": {},
                },
            },
        },
    }
    # sample-and-aggregate (V4): every SAMPLE_FN allowed, REGR_* with declared ranges
    out["functions"] = {"sample_aggregate": ["corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept"],
                        "regr_slope": {"lower": -100, "upper": 100}, "regr_intercept": {"lower": -1000, "upper": 1000}}
    if not relational:
        del out["public"], out["tables"]["visits"], out["tables"]["notes"]
    return out


def _facts(name: str) -> TableFacts:
    return TableFacts("table", tuple(COLUMN_TYPES[name].items()), UNIQUE.get(name, frozenset()), frozenset())


POLICY: Policy = load_policy(policy_dict())
SCHEMA = Schema(columns={"people": COLUMN_TYPES["people"], "staff": COLUMN_TYPES["staff_raw"],
                         "visits": COLUMN_TYPES["visits"], "notes": COLUMN_TYPES["notes"]},
                unique_units=frozenset(), base_tables=frozenset(COLUMN_TYPES),
                views=frozenset({"people_view"}), facts={t: _facts(t) for t in COLUMN_TYPES},
                public={"regions": COLUMN_TYPES["regions"]},
                namespace=("main", "people"))      # DuckDB's, for the corpus's people.duckdb
SETTINGS = Settings(epsilon=1.0, delta=1e-6, mechanism="laplace")


def public_domain(table: str, column: str) -> tuple:
    """A public table column's distinct values, as the engine would read them."""
    assert table == "regions", table
    return tuple(sorted({row[("state", "region").index(column)] for row in REGIONS}))


def check(text: str) -> QueryPlan | PublicQuery | Statement:
    """The query checker: classify + analyze. Raises QueryRejected (or SqlSyntaxError).

    dpsql commands (SET/SHOW/RESET) are returned as their Statement: the session handles them.
    """
    stmt = classify(text)
    if stmt.kind in ("query", "explain"):
        return analyze(stmt.tree, POLICY, SCHEMA, SETTINGS, "duckdb", public_domain)
    return stmt


_KEYWORD = re.compile(r'"([A-Za-z_]+)"i')


def grammar_for(terminals: dict[str, tuple[str, ...]] = TABLE_TERMINALS) -> str:
    """The grammar with the given terminals replaced by the given names (whole words), and its
    keywords matched as whole words: Lark's dynamic lexer would otherwise read the start of a
    longer name as a keyword (`note_id IS NULL` as `NOT e_id IS NULL`)."""
    text = "\n".join(line if line.lstrip().startswith("//") else _KEYWORD.sub(r"/\1\\b/i", line)
                     for line in GRAMMAR.read_text(encoding="utf-8").splitlines())
    lines = [text, ""]
    for name, values in terminals.items():
        words = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
        quoted = "|".join(re.escape(f'"{v}"') for v in values)    # or double-quoted, exactly (`"main"."people"`)
        lines.append(f'%override {name}: /(?<![\\w"])(?:{words}|(?-i:{quoted}))(?![\\w"])/i')
    return "\n".join(lines) + "\n"


def sql_parser() -> Lark:
    """The subset recognizer for the test policy (Earley; `start` for queries, `aggregate`
    for one aggregate call). Every token is kept in the tree, so that the side-condition
    walk can rewrite any part of the text."""
    return Lark(grammar_for(), parser="earley", lexer="dynamic", start=["start", "aggregate"],
                propagate_positions=True, keep_all_tokens=True)


# ----------------------------------------------------------------------------- the policy's names
# Classes of each table's columns, as the terminal list of grammars/dpsql.lark defines them.

ANY_COL = frozenset({"UNIT", "NUM_COL", "UNBOUNDED_NUM_COL", "TEXT_COL", "DATE_COL", "TIMESTAMP_COL"})
ON_COL = ANY_COL | {"LINK_COL", "LINK_KEY"}
FAMILY_CLASSES = {"num": frozenset({"NUM_COL", "UNBOUNDED_NUM_COL"}), "text": frozenset({"TEXT_COL"}),
                  "date": frozenset({"DATE_COL"}), "timestamp": frozenset({"TIMESTAMP_COL"})}


def family(sql_type: str) -> str:
    t = sql_type.lower()
    if t.startswith(("bigint", "int", "smallint", "double", "float", "real", "decimal", "numeric")):
        return "num"
    if t.startswith(("varchar", "text", "char")):
        return "text"
    if t.startswith("timestamp"):
        return "timestamp"
    return "date" if t == "date" else "other"


def _type_class(sql_type: str) -> str:
    return {"num": "UNBOUNDED_NUM_COL", "text": "TEXT_COL", "date": "DATE_COL",
            "timestamp": "TIMESTAMP_COL"}[family(sql_type)]


def _links_to(inner_item, inner_col, outer_item, outer_col) -> bool:
    """S3: the inner column is its protected table's link column, pointing at the outer item's
    table and column, of the same type."""
    link = inner_item.rel.link
    return (inner_item.rel.kind == "protected" and link is not None and inner_col.name == link.column
            and outer_item.rel.kind == "protected" and outer_item.rel.table == link.table
            and outer_col.name == link.key and inner_col.type == outer_col.type)


def table_classes(name: str) -> dict[str, tuple[str, frozenset[str]]]:
    """column -> (type, classes) for a protected (by name or source) or public table."""
    t = POLICY.table(name) or next((t for t in POLICY.tables.values() if t.source == name), None)
    if t is None:
        return {c: (ty, frozenset({_type_class(ty), "KEY_COL"})) for c, ty in COLUMN_TYPES[name].items()}
    out = {}
    link_keys = {(p.link.table, p.link.key) for p in POLICY.tables.values() if p.link is not None}
    for c, ty in COLUMN_TYPES[t.source or t.name].items():
        classes: set[str] = set()
        if c == t.privacy_unit:
            classes = {"UNIT"} | ({"UNBOUNDED_NUM_COL"} if family(ty) == "num" else set())
        elif t.link is not None and c == t.link.column:
            classes = {"LINK_COL"}
        elif t.column(c) is not None:
            bounded = t.column(c).bounded
            classes = {"NUM_COL" if bounded else _type_class(ty), "KEY_COL"}
        if (t.name, c) in link_keys:
            classes.add("LINK_KEY")
        out[c] = (ty, frozenset(classes))
    return out


def _class_names() -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for table in COLUMN_TYPES:
        for c, (_, classes) in table_classes(table).items():
            for k in classes:
                out.setdefault(k, set()).add(c)
    return {k: tuple(sorted(v)) for k, v in out.items()}


_SHIFT_UNITS = {"year": (12, 0), "month": (1, 0), "mon": (1, 0), "week": (0, 7), "day": (0, 1)}


def _shifted(day: dt.date, shift: Tree) -> dt.date | None:
    """V6, read independently of the checker: one date_shift applied as PostgreSQL does (months
    first, the day clamped to the month's end, then days); None outside the years 1-9999."""
    import calendar
    toks = [t for t in shift.children if isinstance(t, Token)]
    sign = -1 if toks[0].value == "-" else 1
    months = days = 0
    kinds = {t.type: t.value for t in toks}
    if "DAY_COUNT" in kinds:
        days = int(kinds["DAY_COUNT"])
    elif "INTERVAL_COUNT" in kinds:
        m, d = _SHIFT_UNITS[kinds["INTERVAL_UNIT"].lower()]
        n = int(kinds["INTERVAL_COUNT"].strip("'"))
        months, days = n * m, n * d
    else:
        for n, unit in re.findall(r"([+-]?[0-9]+) *([a-z]+)", kinds["INTERVAL_TEXT"].strip("'").lower()):
            m, d = _SHIFT_UNITS[unit[:-1] if unit.endswith("s") else unit]
            months, days = months + int(n) * m, days + int(n) * d
    total = day.year * 12 + day.month - 1 + sign * months
    year, month = total // 12, total % 12 + 1
    if not 1 <= year <= 9999:
        return None
    out = dt.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))
    ordinal = out.toordinal() + sign * days
    if not dt.date(1, 1, 1).toordinal() <= ordinal <= dt.date(9999, 12, 31).toordinal():
        return None
    return dt.date.fromordinal(ordinal)


# Names the generator draws for each name terminal: the policy's, and a few an analyst chooses.
NAMES: dict[str, tuple[str, ...]] = _class_names() | {
    "TABLE": ("people", "visits", "notes", "people", "visits", "staff", "staff_raw"),
    "PUBLIC_TABLE": ("regions",),
    "SCHEMA": ("main",),
    "CATALOG": ("people",),
    "CTE_NAME": ("w", "adults"),
    "TABLE_ALIAS": ("p", "t", "v"),
    "QUALIFIER": ("p", "t", "v", "people", "visits"),
    "COLUMN_ALIAS": ("n", "m", "u"),
    "ALIAS": ("n", "total"),
    "KEY_ALIAS": ("k", "grp"),
    "OUTPUT": ("n", "total", "k", "state", "m"),
}
for _cls in ("NUM_COL", "KEY_COL", "UNIT"):          # the columns of per-unit subqueries
    NAMES[_cls] = NAMES[_cls] + ("n", "m", "u")
NAMES["COLUMN"] = tuple(sorted({c for cols in COLUMN_TYPES.values() for c in cols})) + ("n", "m")


# ----------------------------------------------------------------------------- corpus files

class NoEngine:
    """An engine that knows the test schema and refuses to run anything."""
    dialect = "duckdb"

    def table_columns(self, table: str) -> dict[str, str]:
        return dict(COLUMN_TYPES[table.lower()])

    def unique_columns(self, table: str) -> set[str]:
        return set(UNIQUE.get(table.lower(), ()))

    def not_null_columns(self, table: str) -> set[str]:
        return set()

    def base_tables(self) -> set[str]:
        return set(SCHEMA.base_tables)

    def views(self) -> set[str]:
        return set(SCHEMA.views)

    def facts(self, tables: list[str]) -> dict:
        return {t: _facts(t.lower()) for t in tables if t.lower() in COLUMN_TYPES}

    def run(self, sql, params=None, **checks):
        raise AssertionError("a statement the checker should refuse reached the engine")

    def close(self) -> None:
        pass



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


# ----------------------------------------------------------------------------- side conditions
# One walk over a parse tree (kept tokens) that resolves names as PostgreSQL does, scope by
# scope, and checks the side conditions of grammars/dpsql.lark. In check mode the first
# violation is raised; in repair mode each violation is fixed by an edit that keeps the text
# in the grammar (a name replaced by one of the right class in scope, a test replaced by
# `col IS NULL`, an aggregate by COUNT(*), a join condition completed, ...). The edits are
# substitutions of tree nodes, spliced back into the original text at the end.

class Violation(Exception):
    """A side condition that does not hold."""


_GiveUp = GiveUp     # (defined in row_values, which raises it too: one class however this module is imported)


def ident(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text.lower()


_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED = re.search(r"IDENT: /\(\?!\(\?:(.*?)\)\\b\)", GRAMMAR.read_text(encoding="utf-8")).group(1)


def quote(name: str) -> str:
    """A name as the grammar's IDENT writes it."""
    plain = _PLAIN.fullmatch(name) and not re.fullmatch(_RESERVED, name)
    return name if plain else '"' + name.replace('"', '""') + '"'


@dataclass(eq=False)
class Column:
    name: str
    type: str
    classes: frozenset[str]
    unit: bool = False            # a unit column of its relation
    rng: tuple[Fraction, Fraction] | None = None    # a NUM_COL's range (X2)
    whole: bool = False           # its values are whole numbers (X2)
    dom: frozenset | None = None  # a text column's declared values (X4)
    span: tuple | None = None     # a DATE's or TIMESTAMP's declared bounds (X1): dates, or datetimes
    computed: V | None = None     # X7: the value a row-level query's computed item stands for
    origin: tuple | None = None   # V5: (the base table's FROM item, column): the same through subqueries

    @property
    def family(self) -> str:
        return family(self.type)


@dataclass(eq=False)
class Rel:
    """What a FROM item reads: a table, a CTE's body or a subquery."""
    kind: str                     # protected | public | per_unit | row
    columns: list[Column]
    protected: bool
    filtered: bool = False        # J5: a row-level query with a WHERE or a join
    table: str | None = None      # the policy (or public) table of a base table
    link: Any = None              # a linked table's policy Link
    star: bool = False            # a row query selecting *
    items_node: Tree | None = None              # a row query's select list (repair: expose a unit)
    expose: tuple[str, Column] | None = None    # a unit column a row query could select
    aliases: frozenset[str] = frozenset()       # the names of the FROM items inside it, at any depth
    simple: bool = True           # J5: reads one table, per-unit query or simple row query; no IN/EXISTS
    reads: int = 0                # (a CTE) how many FROM items read it, anywhere in the statement
    unit_where: bool = False      # a per-unit query with a WHERE (J4: not on the NULL side of a LEFT JOIN)
    r: int = 1                    # rows x groups one unit may have in it (a per-unit aggregate's range)
    narrow: tuple = ()            # V5: the WHERE conjuncts inlined with it: (origin, node, values, keep)

    @property
    def dups(self) -> bool:
        """Two of its columns have one name."""
        names = [c.name for c in self.columns if not c.name.startswith("?")]
        return len(set(names)) != len(names)


@dataclass(eq=False)
class Item:
    id: int
    alias: str | None             # its qualifier (alias, or table/CTE name); None: an unnamed subquery
    rel: Rel

    def named(self, name: str) -> list[Column]:
        return [c for c in self.rel.columns if c.name == name]


@dataclass(eq=False)
class Output:
    name: str | None
    node: Tree | None = None      # the SELECT item (repair: give it a name)
    alias: Token | None = None    # its AS name
    renamed: bool = False         # renamed by a wrapper (AS another name)


class Scope:
    """The FROM items of one query, with the union-find of columns ON equates."""

    def __init__(self, env: dict, parent: Scope | None = None):
        self.env = env                # the CTEs visible here: name -> Rel
        self.row_reader = False       # the FROM of a row-level subquery or CTE
        self.items: list[Item] = []
        self.parent = parent
        self.uf: dict = {}
        self.using: set[str] = set()

    def find(self, k):
        self.uf.setdefault(k, k)
        while self.uf[k] != k:
            self.uf[k] = self.uf[self.uf[k]]
            k = self.uf[k]
        return k

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.uf[rb] = ra

    def add(self, item: Item) -> None:
        self.items.append(item)
        units = [(item.id, c.name) for c in item.rel.columns if c.unit]
        for k in units[1:]:
            self.union(units[0], k)

    @property
    def protected(self) -> list[Item]:
        return [i for i in self.items if i.rel.protected]

    def aliases(self) -> frozenset[str]:
        """The names of its FROM items and of those inside them."""
        return frozenset(i.alias for i in self.items if i.alias) | frozenset().union(
            *(i.rel.aliases for i in self.items))

    def root(self, item: Item):
        """The unit class of a protected item (a linked table: through its link)."""
        if item.rel.link is not None:
            link = item.rel.link
            for other in self.items:
                if other.rel.table == link.table and other.rel.kind == "protected" and other.rel.link is None \
                        and self.find((item.id, link.column)) == self.find((other.id, link.key)):
                    return self.root(other)
            return ("#", item.id)
        units = [c for c in item.rel.columns if c.unit]
        return self.find((item.id, units[0].name)) if units else ("#", item.id)

    def main_root(self):
        roots = {self.root(i) for i in self.protected}
        return next(iter(roots)) if len(roots) == 1 else None

    def is_unit(self, item: Item, col: Column) -> bool:
        main = self.main_root()
        return col.unit or (main is not None and self.find((item.id, col.name)) == main)


class _Walk(Values):
    """The side-condition walk over one statement's parse tree: the FROM clause of each query
    first (its scope: items, their columns and classes, the unit classes ON makes), then the
    clauses that use it. `bad(message)` marks a violation: check mode raises it, repair mode
    goes on to the fix that follows (substitutions in `sub`, spliced by `render`)."""

    def __init__(self, text: str, repair: bool):
        self.text, self.repair = text, repair
        self.sub: dict[int, Callable[[str], str]] = {}
        self.as_twice: set[str] = set()             # N3: AS names of two items of the query being read
        self.ids = count()
        self.fresh_ids = count(1)
        self.parent: dict[int, Tree] = {}
        self.avoid: frozenset[str] = frozenset()    # (repair) names FROM items must not take
        self.prefer: str | None = None              # (repair) the table a joined item should read

    # -- edits
    def bad(self, message: str) -> None:
        if not self.repair:
            raise Violation(message)

    def replace(self, node, text: str) -> None:
        self.sub[id(node)] = lambda _old, text=text: text

    def wrap(self, node, fn: Callable[[str], str]) -> None:
        prev = self.sub.get(id(node))
        self.sub[id(node)] = fn if prev is None else (lambda old, prev=prev: fn(prev(old)))

    def show(self, colnode: Tree) -> str:
        return "".join(t.value for t in self.toks(colnode))

    def fresh(self) -> str:
        return f"x{next(self.fresh_ids)}"

    def render(self, node=None) -> str:
        if node is None:
            return self.render_span(self.tree, 0, len(self.text))
        if isinstance(node, Token):
            out = node.value
        else:
            out = self.render_span(node, node.meta.start_pos, node.meta.end_pos)
        fn = self.sub.get(id(node))
        return fn(out) if fn is not None else out

    def render_span(self, tree: Tree, start: int, end: int) -> str:
        parts, pos = [], start
        for child in tree.children:
            cs, ce = (child.start_pos, child.end_pos) if isinstance(child, Token) else \
                (child.meta.start_pos, child.meta.end_pos)
            parts.append(self.text[pos:cs])
            parts.append(self.render(child))
            pos = ce
        parts.append(self.text[pos:end])
        return "".join(parts)

    # -- the tree
    def run(self, tree: Tree) -> None:
        self.tree = tree
        for node in tree.iter_subtrees():
            for child in node.children:
                if isinstance(child, Tree):
                    self.parent[id(child)] = node
        stmt = tree.children[0]
        try:
            self.statement(stmt, {})
        except _GiveUp:
            self.replace(stmt, "SELECT COUNT(*) FROM people")

    @staticmethod
    def toks(node, *types: str) -> list[Token]:
        return [c for c in node.children if isinstance(c, Token) and (not types or c.type in types)]

    @staticmethod
    def kw(node, word: str) -> list[Token]:
        return [c for c in node.children if isinstance(c, Token) and c.value.upper() == word]

    @staticmethod
    def trees(node, *names: str) -> list[Tree]:
        return [c for c in node.children if isinstance(c, Tree) and (not names or c.data in names)]

    @staticmethod
    def col_of(node) -> Tree:
        while node.data != "col":
            node = next(c for c in node.children if isinstance(c, Tree))
        return node

    # -- statements
    def statement(self, node: Tree, env: dict) -> list[Output]:
        with_ = self.trees(node, "with_clause")
        if with_:
            env = self.with_clause(with_[0], env)
        body = self.trees(node, "query", "wrapper")[0]
        return self.query(body, env) if body.data == "query" else self.wrapper(body, env)

    def with_clause(self, node: Tree, env: dict) -> dict:
        env = dict(env)
        defined: set[str] = set()
        for cte in self.trees(node, "cte"):
            tok = self.toks(cte, "CTE_NAME")[0]
            name = ident(tok.value)
            if name in defined or name in env or name in COLUMN_TYPES or POLICY.table(name) is not None \
                    or name == "people_view":
                self.bad(f"N1: the CTE name {tok.value} is a table's or a visible CTE's")
                name = self.fresh()
                self.replace(tok, name)
            body = self.trees(cte, "row_query", "per_unit_query")[0]
            try:
                rel = self.row_query(body, env) if body.data == "row_query" else self.per_unit_query(body, env)
            except _GiveUp:
                self.replace(body, "SELECT * FROM people")
                rel = self.people_rows()
            rel = self.column_names(rel, next(iter(self.trees(cte, "column_names")), None))
            defined.add(name)
            env[name] = rel
        return env

    def column_names(self, rel: Rel, node: Tree | None) -> Rel:
        """A relation seen through a column list (N1): its first columns renamed."""
        if node is None:
            return rel
        names = [ident(t.value) for t in self.toks(node, "COLUMN_ALIAS")]
        if len(set(names)) != len(names) or len(names) > len(rel.columns):
            self.bad("N1: a column list with a name twice or more names than columns")
            self.replace(node, "")
            return rel
        cols = [dataclasses.replace(c, name=names[i] if i < len(names) else c.name)
                for i, c in enumerate(rel.columns)]
        if rel.kind == "per_unit" and len({c.name for c in cols}) != len(cols):
            self.bad("P1: a column list gives a per-unit subquery two columns of one name")
            self.replace(node, "")
            return rel
        # every other fact (J4's unit_where included) carries over; the select list is no longer
        # the one to expose a unit in
        return dataclasses.replace(rel, columns=cols, items_node=None, expose=None)

    # -- FROM
    def base(self, name: str) -> Rel:
        t = POLICY.table(name) or next((t for t in POLICY.tables.values() if t.source == name), None)
        cols = [Column(c, ty, classes, unit=(t is not None and c == t.privacy_unit))
                for c, (ty, classes) in table_classes(name).items()]
        if t is None:
            return Rel("public", cols, False, table=name)
        token = next(self.ids)
        for c in cols:
            c.origin = (token, c.name)
            decl = t.column(c.name)
            if decl is not None and decl.values is not None:
                c.dom = frozenset(decl.values)
            if decl is not None and decl.span is not None:
                c.span = decl.span if c.family == "date" else decl.time_span
            if decl is not None and decl.bounded and c.family == "num":
                lo, hi = (Fraction(str(v)) for v in (decl.lower, decl.upper))
                c.rng = (lo, hi)
                c.whole = c.type in ("INTEGER", "BIGINT") and lo.denominator == 1 and hi.denominator == 1
        return Rel("protected", cols, True, table=t.name, link=t.link,
                   r=t.max_rows_per_unit * t.max_groups_per_unit)

    def people_rows(self) -> Rel:
        """(repair) The relation of `SELECT * FROM people`, which replaces a subquery or CTE body."""
        base = self.base("people")
        return Rel("row", [dataclasses.replace(c) for c in base.columns], True, star=True,
                   aliases=frozenset({"people"}), r=base.r)

    def from_clause(self, node: Tree, env: dict, parent: Scope | None = None,
                    avoid: frozenset[str] = frozenset(), need_protected: bool = True, semi: bool = False) -> Scope:
        scope = Scope(env, parent)
        scope.row_reader = not need_protected or semi    # the FROM of a row-level query, or of IN/EXISTS (J5)
        items = [c for c in node.children if isinstance(c, Tree)]
        self.from_item(items[0], env, scope, avoid, first=True)
        for j in items[1:]:
            try:
                self.join(j, env, scope, avoid)
            except _GiveUp:
                self.replace(j, "")
        if not scope.protected:
            if not need_protected:
                return scope
            self.bad("J1: the FROM clause reads no protected table")
            self.add_people(node, scope)
        if scope.main_root() is None:
            self.bad("J2: protected FROM items are not all joined on their units")
            raise _GiveUp
        return scope

    def add_people(self, from_node: Tree, scope: Scope) -> None:
        """(repair) Join `people` to a FROM clause that reads no protected table."""
        alias = self.fresh()
        item = Item(next(self.ids), alias, self.base("people"))
        for other in scope.items:
            if other.alias is None:
                continue
            for c in other.rel.columns:
                mine = [m for m in item.rel.columns if m.family == c.family and m.classes & ON_COL]
                if mine and self.ref_text(scope, other, c) and c.classes & ON_COL:
                    eq = f"{alias}.{mine[0].name} = {self.ref_text(scope, other, c)}"
                    self.wrap(from_node, lambda old, eq=eq: f"{old} JOIN people AS {alias} ON {eq}")
                    scope.add(item)
                    return
        raise _GiveUp

    def from_item(self, node: Tree, env: dict, scope: Scope, avoid: frozenset[str], first: bool) -> Item:
        avoid = avoid | self.avoid
        if node.data == "table_ref":
            # the name and alias are rewritten once, at the end (table_text [AS alias])
            name_tok = self.toks(node)[0]
            prefix = next(iter(self.trees(node, "schema_prefix")), None)
            alias_tok = next(iter(self.toks(node, "TABLE_ALIAS")), None)
            name = ident(name_tok.value)
            if prefix is not None and (name in env or (POLICY.table(name) is not None
                                                       and (POLICY.table(name).source or name) != name)):
                self.bad(f"N5: {name_tok.value} qualified by a schema is a CTE or not the table's engine name")
                self.replace(prefix, "")
            alias = ident(alias_tok.value) if alias_tok is not None else name
            table_text = None                       # a new table name, if the name is replaced
            if name not in env and POLICY.table(name) is None and name not in TABLE_TERMINALS["TABLE"] \
                    and name != "regions":
                self.bad(f"N1: {name_tok.value} is neither a table nor a CTE")
                choices = sorted(env) if env and name_tok.type == "CTE_NAME" else ["people", "visits"]
                name = table_text = choices[zlib.crc32(name.encode()) % len(choices)]
            rel = env[name] if name in env else self.base(name)
            if self.prefer and name not in env and rel.protected and rel.table != self.prefer:
                name = table_text = self.prefer           # (repair, not a violation)
                rel = self.base(name)
            if name in env and rel.kind == "row" and rel.reads >= 1 and not rel.simple:
                self.bad(f"J5: the CTE {name} is read more than once and does not read one simple item")
                table_text, rel = "people", self.base("people")
            elif name in env:
                rel.reads += 1
            if rel.filtered and not first or rel.kind in ("row", "per_unit") and rel.dups and scope.row_reader:
                self.bad(f"J5: the CTE {name} is filtered and not first, or has two columns of one name and is "
                         "read by a row-level query")
                table_text, rel = "people", self.base("people")
            if alias in {i.alias for i in scope.items} | avoid or alias in env and alias != (table_text or name):
                self.bad(f"N1: two FROM items are named {alias}, or it is a CTE's name")
                alias = self.fresh()
                if alias_tok is not None:
                    self.replace(alias_tok, alias)
            if table_text is not None or (alias_tok is None and alias != name):
                written = table_text or name_tok.value
                self.replace(name_tok, written if alias_tok is not None or ident(written) == alias
                             else f"{written} AS {quote(alias)}")
        else:
            inner = self.trees(node, "row_query", "per_unit_query")[0]
            alias_tok = next(iter(self.toks(node, "TABLE_ALIAS")), None)
            alias = ident(alias_tok.value) if alias_tok is not None else None
            try:
                rel = self.row_query(inner, env) if inner.data == "row_query" else self.per_unit_query(inner, env)
            except _GiveUp:
                self.replace(inner, "SELECT * FROM people")
                rel = self.people_rows()
            rel = self.column_names(rel, next(iter(self.trees(node, "column_names")), None))
            if alias is not None and (alias in {i.alias for i in scope.items} | avoid or alias in env):
                self.bad(f"N1: two FROM items are named {alias}, or it is a CTE's name")
                alias = self.fresh()
                self.replace(alias_tok, alias)
            if rel.filtered and not first or rel.kind in ("row", "per_unit") and rel.dups and scope.row_reader:
                self.bad("J5: a subquery is filtered and not first, or has two columns of one name and is read "
                         "by a row-level query")
                alias = alias or self.fresh()
                self.replace(node, f"people AS {quote(alias)}")
                rel = self.base("people")
        item = Item(next(self.ids), alias, rel)
        scope.add(item)
        return item

    def join(self, node: Tree, env: dict, scope: Scope, avoid: frozenset[str]) -> None:
        left = list(scope.items)
        # (repair) a linked table on the left whose target is not there: join the target
        linked = [i.rel.link.table for i in left if i.rel.link is not None and scope.root(i)[0] == "#"]
        self.prefer = linked[0] if self.repair and linked else None
        right = self.from_item(self.trees(node, "table_ref", "derived_table")[0], env, scope, avoid, first=False)
        self.prefer = None
        if node.data == "left_join" and right.rel.protected and not any(i.rel.protected for i in left):
            self.bad("J4: a LEFT JOIN onto a protected item")
            self.replace(self.kw(node, "LEFT")[0], "")
        elif node.data == "left_join" and right.rel.kind in ("per_unit", "row") and right.rel.unit_where:
            self.bad("J4: a per-unit subquery with a WHERE on the NULL side of a LEFT JOIN")
            self.replace(self.kw(node, "LEFT")[0], "")
        cond = self.trees(node, "join_condition")[0]
        try:
            if self.kw(cond, "USING"):
                eqs = self.using(cond, scope, left, right)
            else:
                eqs = None
                for eq in self.trees(cond, "join_eq"):
                    self.join_eq(eq, scope, left, right)
            self.connect(cond, scope, left, right, eqs)
        except _GiveUp:
            scope.items.remove(right)
            raise

    def join_eq(self, eq: Tree, scope: Scope, left: list[Item], right: Item) -> None:
        a, b = (self.col_of(c) for c in self.trees(eq))
        ra, rb = self.resolve(a, scope), self.resolve(b, scope)
        ok = (ra is not None and rb is not None and ra[0] is not rb[0] and ra[1].classes & ON_COL
              and rb[1].classes & ON_COL and ra[1].family == rb[1].family != "other")
        if not ok:
            self.bad("J3: an ON equality that does not relate two items' columns of one type family")
            text = None
            if right.rel.protected and any(i.rel.protected for i in left) and scope.main_root() is None:
                eqs = self.unit_eqs(scope, left, right)
                text = " AND ".join(eqs) if eqs else None
            text = text or self.some_eq(scope, right)
            if text is None:
                raise _GiveUp
            self.replace(eq, text)
            return
        if ra[1].type == rb[1].type:
            scope.union((ra[0].id, ra[1].name), (rb[0].id, rb[1].name))

    def some_eq(self, scope: Scope, right: Item) -> str | None:
        """(repair) A valid ON equality between `right` and an item on its left (columns of one
        name first)."""
        for same_name in (True, False):
            for c in right.rel.columns:
                r = self.ref_text(scope, right, c)
                if not r or not c.classes & ON_COL:
                    continue
                for other in scope.items:
                    if other is right:
                        continue
                    for d in other.rel.columns:
                        if same_name and d.name != c.name:
                            continue
                        o = self.ref_text(scope, other, d)
                        if o and d.classes & ON_COL and d.family == c.family != "other":
                            if c.type == d.type:
                                scope.union((right.id, c.name), (other.id, d.name))
                            return f"{o} = {r}"
        return None

    def using(self, cond: Tree, scope: Scope, left: list[Item], right: Item) -> list[str] | None:
        """USING (c, ...): one column c on each side (N1, J3). Returns the equalities it means
        (for the repair, which may have to write them as ON)."""
        names = [ident(c.children[0].value) for c in self.trees(cond, "using_col")]
        pairs = []
        for k, name in enumerate(names):
            if not self.using_ok(name, left, right) or name in names[:k]:
                self.bad(f"J3: USING ({name}) does not name one column of each side, of one type family")
                common = [c.name for c in right.rel.columns if self.using_ok(c.name, left, right)]
                if common:                          # another column both sides have
                    name = sorted(common, key=lambda n: (n != "person_id", n))[0]
                    self.replace(cond, f"USING ({name})")
                    names = [name]
                    pairs = []
                    mine = right.named(name)
                    theirs = [(i, i.named(name)) for i in left if i.named(name)]
                    pairs.append((theirs[0][0], theirs[0][1][0], mine[0]))
                    break
                text = self.some_eq(scope, right)
                if text is None:
                    raise _GiveUp
                self.replace(cond, f"ON {text}")
                return [text]
            mine = right.named(name)
            theirs = [(i, i.named(name)) for i in left if i.named(name)]
            pairs.append((theirs[0][0], theirs[0][1][0], mine[0]))
        texts = []
        for other, c, m in pairs:
            if c.type == m.type:
                scope.union((other.id, c.name), (right.id, m.name))
            scope.using.add(m.name)
            a, b = self.ref_text(scope, other, c), self.ref_text(scope, right, m)
            texts.append(f"{a} = {b}" if a and b else None)
        return texts

    @staticmethod
    def using_ok(name: str, left: list[Item], right: Item) -> bool:
        """USING (name): one column of that name on the right, and in exactly one item on the left
        (not a subquery without alias), of one type family."""
        mine = right.named(name)
        items = [i for i in left if i.named(name)]
        theirs = [i.named(name) for i in items]
        return (len(mine) == 1 and len(theirs) == 1 and len(theirs[0]) == 1 and bool(mine[0].classes & ANY_COL)
                and bool(theirs[0][0].classes & ANY_COL) and theirs[0][0].family == mine[0].family != "other"
                and items[0].alias is not None)

    def connect(self, cond: Tree, scope: Scope, left: list[Item], right: Item, using: list[str] | None) -> None:
        """(repair) J2 after each join: the protected items so far share one unit class. (The
        check itself is made once the FROM clause is complete.)"""
        if not self.repair or not right.rel.protected or not any(i.rel.protected for i in left):
            return
        if scope.main_root() is not None:
            return
        eqs = self.unit_eqs(scope, left, right)
        if eqs is None:
            raise _GiveUp
        text = " AND ".join(eqs)
        if using is not None:               # USING becomes ON, with the equalities it meant
            if None in using:
                raise _GiveUp
            self.replace(cond, "ON " + " AND ".join(eqs + using))
        else:
            first_eq = self.trees(cond, "join_eq")[0]
            self.wrap(first_eq, lambda old: f"{text} AND {old}")

    def unit_eqs(self, scope: Scope, left: list[Item], right: Item) -> list[str] | None:
        """(repair) Equalities that join `right` to the unit class of the protected items on its left."""
        prot = [i for i in left if i.rel.protected]
        link = right.rel.link
        if link is not None:
            for t in left:
                if t.rel.table == link.table and t.rel.kind == "protected" and t.rel.link is None:
                    a, b = self.ref_text(scope, right, right.named(link.column)[0]), \
                        self.ref_text(scope, t, t.named(link.key)[0])
                    if a and b:
                        scope.union((right.id, link.column), (t.id, link.key))
                        return [f"{a} = {b}"] if scope.main_root() is not None else None
            return None
        linked = [i for i in prot if i.rel.link is not None and scope.root(i)[0] == "#"]
        if linked and right.rel.kind == "protected" and right.rel.table == linked[0].rel.link.table:
            n = linked[0]
            a = self.ref_text(scope, n, n.named(n.rel.link.column)[0])
            b = self.ref_text(scope, right, right.named(n.rel.link.key)[0])
            if a and b:
                scope.union((n.id, n.rel.link.column), (right.id, n.rel.link.key))
                if scope.main_root() is not None:
                    return [f"{a} = {b}"]
            return None
        if self.unit_ref(scope, right) is None:
            return None
        for other in prot:
            if self.unit_ref(scope, other) is not None:
                # again: a unit a row query was made to select can make a bare name ambiguous
                r, o = self.unit_ref(scope, right), self.unit_ref(scope, other)
                if r is None or o is None:
                    return None
                scope.union((right.id, r[1].name), (other.id, o[1].name))
                if scope.main_root() is not None:
                    return [f"{o[0]} = {r[0]}"]
        return None

    def unit_ref(self, scope: Scope, item: Item) -> tuple[str, Column] | None:
        """(repair) A reference to a unit column of `item` (a row query may be made to select one)."""
        root = scope.root(item)
        for c in item.rel.columns:
            if (c.unit or scope.find((item.id, c.name)) == root) and c.type == "BIGINT":
                text = self.ref_text(scope, item, c)
                if text:
                    return text, c
        rel = item.rel
        if rel.kind == "row" and rel.expose is not None and not rel.star and self.repair:
            inner, col = rel.expose
            # a fresh name if any item here has a column of this name: a bare reference to it,
            # already checked in an earlier ON, must not become ambiguous
            taken = [c for c in rel.columns if c.name == col.name] or any(i.named(col.name) for i in scope.items)
            name = col.name if not taken else self.fresh()
            self.wrap(rel.items_node, lambda old: f"{old}, {inner}" + (f" AS {name}" if name != col.name else ""))
            new = dataclasses.replace(col, name=name, unit=True)
            rel.columns.append(new)
            rel.expose = None
            units = [c for c in rel.columns if c.unit and c is not new]
            if units:
                scope.union((item.id, units[0].name), (item.id, name))
            text = self.ref_text(scope, item, new)
            return (text, new) if text else None
        return None

    def ref_text(self, scope: Scope, item: Item, col: Column) -> str | None:
        """How to refer to `item`'s column `col` in this scope, if it can be referred to."""
        if len(item.named(col.name)) != 1 or col.name.startswith("?"):
            return None
        if item.alias is not None:
            return f"{quote(item.alias)}.{quote(col.name)}"
        if col.name in scope.using or sum(len(i.named(col.name)) for i in scope.items) != 1:
            return None
        return quote(col.name)

    # -- names
    def resolve(self, colnode: Tree, scope: Scope, outer: bool = False):
        """(item, column) a `col` node names in this scope (with outer=True: or in the parent
        scope, returned as ("outer", item, column)); None if it names nothing."""
        toks = self.toks(colnode)
        name = ident(toks[-1].value)
        qual = ident(toks[-3].value) if len(toks) >= 3 else None
        for sc, is_outer in ((scope, False), (scope.parent, True)):
            if sc is None or (is_outer and not outer):
                break
            if qual is not None:
                found = [i for i in sc.items if i.alias == qual]
                if found and len(toks) == 5 and not (found[0].rel.kind in ("protected", "public")
                                                     and found[0].rel.table == qual
                                                     and (POLICY.table(qual) is None or POLICY.table(qual).source
                                                          in (None, qual))):
                    self.bad(f"N5: {qual}.{name} qualified by a schema, and {qual} is not a table's implicit alias")
                    self.replace(toks[0], "")
                    self.replace(toks[1], "")
                if found:
                    cols = found[0].named(name)
                    if len(cols) != 1:
                        return None
                    return ("outer", found[0], cols[0]) if is_outer else (found[0], cols[0])
                continue
            having = [i for i in sc.items if i.named(name)]
            if not having:
                continue
            if len(having) != 1 or len(having[0].named(name)) != 1 or name in sc.using:
                return None
            return ("outer", having[0], having[0].named(name)[0]) if is_outer else \
                (having[0], having[0].named(name)[0])
        return None

    def pick(self, scope: Scope, classes: frozenset[str] | None, hint: str, ok=None) -> tuple[str, Item, Column]:
        """(repair) A column of one of `classes` in scope; raises _GiveUp if there is none."""
        cands = []
        for item in scope.items:
            for c in item.rel.columns:
                if (classes is None or c.classes & classes) and (ok is None or ok(item, c)):
                    text = self.ref_text(scope, item, c)
                    if text:
                        cands.append((text, item, c))
        if not cands:
            raise _GiveUp
        same = [x for x in cands if x[2].name == ident(hint)]
        return (same or cands)[zlib.crc32(hint.encode()) % len(same or cands)]

    def column(self, colnode: Tree, scope: Scope, classes: frozenset[str] | None, what: str, ok=None):
        """The (item, column) a column reference names, of one of `classes` (any column if None)
        (N1); fixed in repair."""
        r = self.resolve(colnode, scope)
        if r is not None and (classes is None or r[1].classes & classes) and (ok is None or ok(*r)):
            return r
        self.bad(f"N1: {self.show(colnode)} is not a {what} in scope")
        text, item, col = self.pick(scope, classes, self.toks(colnode)[-1].value, ok)
        self.replace(colnode, text)
        return item, col

    # -- subqueries
    def row_query(self, node: Tree, env: dict) -> Rel:
        frm = self.trees(node, "from_clause")[0]
        scope = self.from_clause(frm, env, need_protected=False)
        where = self.trees(node, "where_clause")
        if where:
            self.where(where[0], scope)
        items_node = self.trees(node, "row_items")[0]
        cols: list[Column] = []
        star = not self.trees(items_node)
        if star:
            for item in scope.items:
                cols += [dataclasses.replace(c, unit=scope.is_unit(item, c)) for c in item.rel.columns]
        else:
            for ri in self.trees(items_node, "row_item"):
                alias = self.toks(ri, "COLUMN_ALIAS")
                first = ri.children[0]
                if self.bare_col(first) is None:        # X7: a computed column stands for its value
                    cols.append(self.computed(first, scope, ident(alias[0].value) if alias else f"?{len(cols)}"))
                    continue
                item, col = self.column(self.bare_col(first), scope, None, "column")
                name = ident(alias[0].value) if alias else col.name
                cols.append(dataclasses.replace(col, name=name, unit=scope.is_unit(item, col)))
        expose = None
        for item in scope.protected:
            for c in item.rel.columns:
                text = self.ref_text(scope, item, c)
                if text and scope.is_unit(item, c) and c.type == "BIGINT":
                    expose = (text, dataclasses.replace(c, unit=True))
                    break
            if expose:
                break
        filtered = bool(where) or len(scope.items) > 1 or any(i.rel.filtered for i in scope.items)
        # J5: one FROM item, a table, a per-unit query or a row query that is itself simple
        simple = (len(scope.items) == 1 and (scope.items[0].rel.kind in ("protected", "public", "per_unit")
                                             or scope.items[0].rel.kind == "row" and scope.items[0].rel.simple)
                  and not (where and any(where[0].find_pred(lambda t: t.data in ("in_subquery", "exists"))))
                  and all(c.computed is None for c in cols))           # columns only (X7)
        return Rel("row", cols, bool(scope.protected), filtered=filtered, star=star, items_node=items_node,
                   expose=expose, aliases=scope.aliases(), simple=simple,
                   r=math.prod(i.rel.r for i in scope.protected),
                   unit_where=any(i.rel.unit_where for i in scope.items),    # J4: inlined, it brings them along
                   narrow=self.narrowing(where[0] if where else None, scope))

    def per_unit_query(self, node: Tree, env: dict) -> Rel:
        frm = self.trees(node, "from_clause")[0]
        scope = self.from_clause(frm, env)
        where = self.trees(node, "where_clause")
        if where:
            self.where(where[0], scope)
        def unit_ok(item, c):
            return scope.is_unit(item, c)
        entries = [c for c in self.trees(node, "per_unit_items")[0].children if isinstance(c, Tree)]
        cols: list[Column] = []
        R = Fraction(math.prod(i.rel.r for i in scope.protected))
        for e in entries:
            alias = self.toks(e, "COLUMN_ALIAS")
            if e.data == "unit_item":
                item, col = self.column(self.col_of(e.children[0]), scope, ANY_COL, "unit column", unit_ok)
                cols.append(Column(ident(alias[0].value) if alias else col.name, col.type,
                                   frozenset({"UNIT"} | ({"UNBOUNDED_NUM_COL"} if col.family == "num" else set())),
                                   unit=True))
                continue
            agg = e.children[0]
            fn = agg.children[0].value.upper()
            arg = agg.children[2]
            ty = "BIGINT"
            col = None
            if not (isinstance(arg, Token) and arg.value == "*"):
                classes = ANY_COL if fn == "COUNT" else frozenset({"NUM_COL"})
                try:
                    _, col = self.column(self.col_of(arg), scope, classes, "column")
                except _GiveUp:
                    self.replace(agg, "COUNT(*)")
                    fn, col = "COUNT", None
                if fn in ("MIN", "MAX") and col is not None:
                    ty = col.type
                elif fn == "AVG" or (fn == "SUM" and col is not None and (col.type != "INTEGER" and col.type != "BIGINT")):
                    ty = "DOUBLE"
            # its range (X2): COUNT in [0, R]; SUM in [min(0, R lo), max(0, R hi)]; AVG, MIN, MAX in [lo, hi]
            if fn == "COUNT" or col is None or col.rng is None:
                rng, whole = (Fraction(0), R), True
            elif fn == "SUM":
                rng, whole = (min(Fraction(0), R * col.rng[0]), max(Fraction(0), R * col.rng[1])), col.whole
            else:
                rng, whole = col.rng, col.whole and fn != "AVG"
            # an aggregate without AS has a name no query can write (a column list can rename it)
            cols.append(Column(ident(alias[0].value) if alias else f"?{len(cols)}", ty,
                               frozenset({"NUM_COL", "KEY_COL"}), rng=rng, whole=whole))
        seen: set[str] = set()
        for e, c in zip(entries, cols):
            if c.name in seen:
                self.bad(f"P1: the per-unit subquery has two items named {c.name}")
                c.name = self.fresh()
                alias = self.toks(e, "COLUMN_ALIAS")
                if alias:
                    self.replace(alias[0], c.name)
                else:
                    self.wrap(e, lambda old, n=c.name: f"{old} AS {n}")
            seen.add(c.name)
        group = node.children[-1]
        if isinstance(group, Token):
            units = [i for i, e in enumerate(entries) if e.data == "unit_item"]
            if str(units[0] + 1) != group.value:
                self.bad("N4: the per-unit GROUP BY position does not name the unit item")
                self.replace(group, str(units[0] + 1))
        else:
            self.column(self.col_of(group), scope, ANY_COL, "unit column", unit_ok)
        # J4: a per-unit query reading a filtered per-unit query is filtered too
        filtered = bool(where) or any(i.rel.unit_where for i in scope.items)
        return Rel("per_unit", cols, True, aliases=scope.aliases(), unit_where=filtered, r=1)

    # -- WHERE
    def where(self, node: Tree, scope: Scope) -> None:
        self.condition(node.children[1], scope)

    def narrowing(self, where: Tree | None, scope: Scope) -> tuple:
        """V5: what the top-level conjuncts of a WHERE (and of the row-level subqueries and CTEs it
        inlines) keep of a column's values: col = lit, lit = col, col IN (lits) keep those; <>, NOT,
        NOT IN drop them. A literal is a string, or a whole number written with digits only."""
        out = [e for i in scope.items if i.rel.kind == "row" for e in i.rel.narrow]
        if where is None:
            return tuple(out)

        def conjuncts(n) -> list:
            if isinstance(n, Tree) and n.data == "and_cond":
                return conjuncts(n.children[0]) + conjuncts(n.children[2])
            if isinstance(n, Tree) and n.data == "test" and isinstance(n.children[0], Token) \
                    and n.children[0].value == "(":
                return conjuncts(n.children[1])
            return [n]

        def lit(n):
            if isinstance(n, Token) and n.type == "STRING":
                return n.value[1:-1].replace("''", "'")
            if isinstance(n, Tree) and n.data == "num_lit":
                if any(t.value == "-" for t in self.toks(n, "SIGN")):
                    return None
                v = self.toks(n, "NUMBER")[0].value
                return int(v) if v.isdigit() else None
            return None

        for c in conjuncts(where.children[1]):
            keep, node = True, c
            if isinstance(node, Tree) and node.data == "not_cond":
                keep, node = False, node.children[1]
            while isinstance(node, Tree) and node.data == "test" and node.children[0] == "(":
                node = node.children[1]
            if not (isinstance(node, Tree) and node.data in ("num_test", "text_test")):
                continue
            kids = [k for k in node.children if not (isinstance(k, Token) and k.type in ("COMMENT",))]
            ops = self.toks(node, "CMP_OP")
            cols = [k for k in kids if isinstance(k, Tree) and k.data in ("col", "num_col")]
            if ops and ops[0].value in ("=", "<>", "!=") and len(kids) == 3 and len(cols) == 1:
                other = kids[2] if kids[0] is cols[0] else kids[0]
                vals = [lit(other)]
                keep = keep == (ops[0].value == "=")
            elif any(isinstance(k, Token) and k.value.upper() == "IN" for k in kids) and len(cols) == 1 \
                    and kids[0] is cols[0]:
                keep = keep != any(isinstance(k, Token) and k.value.upper() == "NOT" for k in kids)
                vals = [lit(k) for k in kids[1:] if isinstance(k, Tree) and k.data == "num_lit"
                        or isinstance(k, Token) and k.type == "STRING"]
            else:
                continue
            if not vals or any(v is None for v in vals):
                continue
            r = self.resolve(self.col_of(cols[0]), scope)
            if r is not None and r[1].origin is not None:
                out.append((r[1].origin, c, frozenset(vals), keep))
        return tuple(out)

    def condition(self, node, scope: Scope) -> None:
        if isinstance(node, Token):
            return
        if node.data in ("or_cond", "and_cond", "not_cond", "test", "condition", "row_or", "row_and", "row_not",
                         "row_test", "row_condition"):
            for c in self.trees(node):
                self.condition(c, scope)
            return
        try:
            self.test(node, scope)
        except _GiveUp:
            text, _, _ = self.pick(scope, ANY_COL, "x")
            self.replace(node, f"{text} IS NULL")

    def test(self, node: Tree, scope: Scope) -> None:
        kind = node.data
        if kind == "in_subquery":
            return self.in_subquery(node, scope)
        if kind == "exists":
            return self.exists(node, scope)
        if kind == "date_fn_test":
            return self.date_fn_test(node, scope)
        cols = [self.col_of(c) for c in self.trees(node, "col", "num_col", "any_col")]
        if kind == "unit_eq":
            kind = "num_test"
        if kind == "null_test":
            self.column(cols[0], scope, ANY_COL, "column")
            return
        if kind == "text_test" and cols and not self.toks(node, "LIKE_OP"):
            strings = self.toks(node, "STRING")
            first = self.resolve(cols[0], scope)
            dated = FAMILY_CLASSES["date"] | FAMILY_CLASSES["timestamp"]
            if strings and len(cols) == 1 and first is not None and first[1].classes & dated \
                    and all(re.fullmatch(r"'\d{4}-\d{2}-\d{2}'", t.value) for t in strings):
                # V1: a string compared with a DATE or TIMESTAMP column is read as DATE '...'
                kind = "date_test" if first[1].classes & FAMILY_CLASSES["date"] else "timestamp_test"
                for t in strings:
                    try:
                        dt.date.fromisoformat(t.value.strip("'"))
                    except ValueError:
                        self.bad(f"V1: {t.value} is not a date")
                        self.replace(t, "'2020-01-01'")
        fam = {"num_test": "num", "text_test": "text", "date_test": "date", "timestamp_test": "timestamp"}[kind]
        literal = any(isinstance(c, Token) and c.type in ("STRING",) or isinstance(c, Tree) and
                      c.data in ("num_lit", "date_lit", "timestamp_lit") for c in node.children)
        if len(cols) == 2 and not literal:
            first = self.resolve(cols[0], scope)
            fams = [f for f, cl in FAMILY_CLASSES.items() if first is not None and first[1].classes & cl]
            if not fams:
                first = self.column(cols[0], scope, FAMILY_CLASSES[fam], f"{fam} column")
                fams = [fam]
            second = self.resolve(cols[1], scope)
            if second is None or not any(second[1].classes & FAMILY_CLASSES[f] for f in fams):
                self.column(cols[1], scope, FAMILY_CLASSES[fams[0]], f"{fams[0]} column")
            return
        for c in cols:
            self.column(c, scope, FAMILY_CLASSES[fam], f"{fam} column")
        if node.children and self.toks(node, "LIKE_OP"):
            pattern = self.toks(node, "STRING")[0].value[1:-1].replace("''", "'")
            i = 0
            while i < len(pattern):
                if pattern[i] == "\\":
                    if i + 1 >= len(pattern) or pattern[i + 1] not in "%_\\":
                        self.bad("V3: a LIKE pattern with a dangling escape")
                        self.replace(self.toks(node, "STRING")[0], "'%'")
                        break
                    i += 2
                else:
                    i += 1
            if len(pattern) > 1000:
                self.bad("V3: a LIKE pattern longer than 1,000 characters")
                self.replace(self.toks(node, "STRING")[0], "'%'")
        self.real_dates(node)

    def real_dates(self, node: Tree) -> None:
        """V1: the DATE and TIMESTAMP literals of a test are real dates and times of day; V6: the
        shifts of a DATE literal stay in the years 1-9999."""
        for lit in self.trees(node, "date_lit"):
            for d in self.toks(lit, "DATE_STRING"):
                try:
                    day = dt.date.fromisoformat(d.value.strip("'"))
                except ValueError:
                    self.bad(f"V1: {d.value} is not a date")
                    self.replace(d, "'2020-01-01'")
                    day = dt.date(2020, 1, 1)
            seen_interval = False
            for shift in self.trees(lit, "date_shift"):
                days_only = any(t.type == "DAY_COUNT" for t in shift.children if isinstance(t, Token))
                if days_only and seen_interval:
                    # V6: sqlglot reads `d + INTERVAL ... + 7` as `d + (INTERVAL ... + 7)`: a number of
                    # days goes before the first INTERVAL
                    self.bad("V6: a number of days after an INTERVAL")
                    self.replace(shift, "")
                    continue
                seen_interval |= not days_only
                day = _shifted(day, shift)
                if day is None:
                    self.bad("V6: date arithmetic outside the years 1-9999")
                    for later in self.trees(lit, "date_shift"):
                        self.replace(later, "")
                    break
        for d in (t for c in self.trees(node, "timestamp_lit") for t in self.toks(c, "TIMESTAMP_STRING")):
            try:
                dt.datetime.fromisoformat(d.value.strip("'"))
            except ValueError:
                self.bad(f"V1: {d.value} is not a date and time of day")
                self.replace(d, "'2020-01-01 00:00:00'")

    def in_subquery(self, node: Tree, scope: Scope) -> None:
        outer_col, inner_col = (c for c in self.trees(node, "col"))
        outer = self.resolve(outer_col, scope)
        frm = self.trees(node, "from_clause")[0]
        try:
            inner = self.from_clause(frm, scope.env, semi=True)
        except _GiveUp:
            self.replace(frm, "FROM people")
            inner = Scope(scope.env)
            inner.add(Item(next(self.ids), "people", self.base("people")))
        found = self.resolve(inner_col, inner)
        linked = outer is not None and found is not None and _links_to(found[0], found[1], *outer)   # S3
        if not linked:
            self.column(outer_col, scope, frozenset({"UNIT"}) | ANY_COL, "unit column of the query",
                        lambda i, c: scope.is_unit(i, c))
            self.column(inner_col, inner, ANY_COL, "unit column of the subquery", lambda i, c: inner.is_unit(i, c))
        where = self.trees(node, "where_clause")
        if where:
            self.where(where[0], inner)

    def exists(self, node: Tree, scope: Scope) -> None:
        frm = self.trees(node, "from_clause")[0]
        saved = self.avoid
        if self.repair:
            self.avoid = self.avoid | scope.aliases()
        try:
            inner = self.from_clause(frm, scope.env, parent=scope, semi=True)
        except _GiveUp:
            alias = self.fresh()
            self.replace(frm, f"FROM people AS {alias}")
            inner = Scope(scope.env, scope)
            inner.add(Item(next(self.ids), alias, self.base("people")))
        finally:
            self.avoid = saved
        corr = self.trees(node, "correlation")[0]
        conjuncts: list[Tree] = []

        def flatten(n):
            if isinstance(n, Tree) and n.data == "and_cond":
                for c in self.trees(n):
                    flatten(c)
            elif isinstance(n, Tree) and n.data == "test" and len(n.children) == 3:
                flatten(n.children[1])
            elif isinstance(n, Tree):
                conjuncts.append(n)
        for c in self.trees(corr):
            flatten(c)
        outer_refs = [c for c in conjuncts
                      if any(self.resolve(x, inner) is None and self.resolve(x, inner, outer=True) is not None
                             for x in self.cols_here(c))]
        if len(outer_refs) == 1 and self.unit_equality(outer_refs[0], inner):
            todo = [c for c in conjuncts if c is not outer_refs[0]]
        else:
            self.bad("S2: EXISTS is not correlated by exactly one equality of units")
            eq = self.trees(corr, "unit_eq")[0]
            i = next((r for r in (self.unit_ref(inner, x) for x in inner.protected) if r is not None), None)
            o = next((r for r in (self.unit_ref(scope, x) for x in scope.protected if x.alias is not None)
                      if r is not None and "." in r[0]), None)
            if i is None or o is None or inner.aliases() & scope.aliases():
                raise _GiveUp
            self.replace(eq, f"{i[0]} = {o[0]}")
            todo = [c for c in conjuncts if c is not eq]
        for c in todo:
            self.condition(c, inner)

    def cols_here(self, node: Tree) -> list[Tree]:
        """The column references of a condition that belong to its own scope (not those of the
        subqueries in it, except the tested column of IN)."""
        out = []
        if node.data == "col":
            return [node]
        for c in node.children:
            if not isinstance(c, Tree):
                continue
            if c.data == "exists":
                continue
            if c.data == "in_subquery":
                out.append(self.trees(c, "col")[0])
                continue
            out += self.cols_here(c)
        return out

    def unit_equality(self, test: Tree, inner: Scope) -> bool:
        """S2: `x = y`, a unit column of the subquery and a qualified one of the outer query."""
        if test.data not in ("unit_eq", "num_test", "text_test") or len(test.children) != 3:
            return False
        a, op, b = test.children
        if not (isinstance(op, Token) and op.value == "=" and isinstance(a, Tree) and isinstance(b, Tree)
                and a.data in ("col", "num_col") and b.data in ("col", "num_col")):
            return False
        cols = [self.col_of(a), self.col_of(b)]
        sides = [self.resolve(c, inner, outer=True) for c in cols]
        if any(s is None for s in sides):
            return False
        outer = [k for k, s in enumerate(sides) if s[0] == "outer"]
        if len(outer) != 1 or len(self.toks(cols[outer[0]])) != 3:
            return False                                  # one outer side, qualified
        if inner.aliases() & inner.parent.aliases():
            return False                                  # no FROM item inside reuses a name of one outside
        _, oi, ocol = sides[outer[0]]
        ii, icol = sides[1 - outer[0]]
        if ocol.type == icol.type and _links_to(ii, icol, oi, ocol):      # S3: through a link key
            return True
        return inner.parent.is_unit(oi, ocol) and inner.is_unit(ii, icol) and ocol.type == icol.type

    # -- the aggregate query
    def query(self, node: Tree, env: dict) -> list[Output]:
        frm = self.trees(node, "from_clause")[0]
        scope = self.from_clause(frm, env)
        where = self.trees(node, "where_clause")
        if where:
            self.where(where[0], scope)
        items = [c for c in self.trees(node, "select_list")[0].children if isinstance(c, Tree)]
        keys: dict[int, tuple] = {}              # id(key_item) -> its identity: (item id, column name) or a signature
        used: list[tuple[tuple, str]] = []        # keys used outside GROUP BY: (identity, text for GROUP BY)
        agg_aliases, key_aliases = set(), set()
        alias_of: dict[str, Tree] = {}            # a key item's alias -> the item
        alias_count: dict[str, int] = {}          # how many SELECT items have that name
        doms: dict[tuple, int | None] = {}        # a key's identity -> its public domain's size, if any
        exprs: dict[tuple, list] = {}             # a key expression's identity -> its nodes (repair: X4)
        constants: set[tuple] = set()             # key items that read no column (X5)
        key_cols: dict[tuple, Column] = {}        # a key column's identity -> the column (V5)
        outputs = []

        def key_ok(item, c):
            return "KEY_COL" in c.classes and not scope.is_unit(item, c) and not (c.computed and c.computed.unit)

        def col_dom(item, c) -> int | None:
            if c.computed is not None:             # X7: the key is the value it stands for
                v = c.computed
                return None if v.dom is None or (v.kind == "num" and not v.whole) else len(v.dom)
            if c.dom is not None:
                return len(c.dom)
            t = POLICY.table(item.rel.table) if item.rel.table else None
            decl = t.column(c.name) if t is not None else None
            if decl is not None and decl.values is not None:
                return len(decl.values)
            if item.rel.kind == "public":
                return len(public_domain(item.rel.table, c.name))
            return None

        def key_expr(target) -> tuple:
            v = self.key_value(target, scope)
            ident_ = ("expr", self.signature(target, scope))
            doms[ident_] = None if v.dom is None else len(v.dom)
            exprs.setdefault(ident_, []).append(target)
            if not v.cols:
                constants.add(ident_)
            return ident_

        for it in items:
            if it.data == "key_item":
                target = it.children[0]
                alias = self.toks(it, "KEY_ALIAS")
                bare = self.bare_col(target)
                if bare is None:
                    identity = key_expr(target)
                    keys[id(it)] = identity
                    used.append((identity, None))
                    if alias:
                        key_aliases.add(ident(alias[0].value))
                        alias_of.setdefault(ident(alias[0].value), it)
                    outputs.append(Output(ident(alias[0].value) if alias else self.plus_name(target), it,
                                          alias[0] if alias else None))
                    continue
                try:
                    item, col = self.column(bare, scope, frozenset({"KEY_COL"}), "key column", key_ok)
                except _GiveUp:
                    self.replace(target, "COUNT(*)")
                    outputs.append(Output(ident(alias[0].value) if alias else None, it, alias[0] if alias else None))
                    if alias:
                        agg_aliases.add(ident(alias[0].value))
                    continue
                keys[id(it)] = (item.id, col.name)
                doms[(item.id, col.name)] = col_dom(item, col)
                key_cols[(item.id, col.name)] = col
                used.append(((item.id, col.name), self.ref_text(scope, item, col) or col.name))
                if alias:
                    key_aliases.add(ident(alias[0].value))
                    alias_of.setdefault(ident(alias[0].value), it)
                outputs.append(Output(ident(alias[0].value) if alias else col.name, it, alias[0] if alias else None))
            else:
                for agg in [t for t in it.iter_subtrees_topdown() if t.data == "aggregate"]:
                    self.aggregate(agg, scope)
                alias = self.toks(it, "ALIAS")
                if alias:
                    agg_aliases.add(ident(alias[0].value))
                outputs.append(Output(ident(alias[0].value) if alias else None, it, alias[0] if alias else None))
        for o in outputs:
            if o.name is not None:
                alias_count[o.name] = alias_count.get(o.name, 0) + 1
        spelled: dict[str, set[str]] = {}         # N3: an AS name of two different items is ambiguous in ORDER BY
        for o in outputs:
            if o.alias is not None:
                spelled.setdefault(o.name, set()).add(re.sub(r"\s+", "", self.render(o.node.children[0])).lower())
        self.as_twice = {n for n, texts in spelled.items() if len(texts) > 1}
        grouped: set[tuple] = set()
        group = self.trees(node, "group_clause")

        def group_col(item, col) -> None:
            grouped.add((item.id, col.name))
            doms[(item.id, col.name)] = col_dom(item, col)
            key_cols[(item.id, col.name)] = col

        def group_pick(g, hint: str) -> bool:
            """(repair) GROUP BY a key column of the scope in g's place; False if there is none (no GROUP BY)."""
            try:
                text, item, col = self.pick(scope, frozenset({"KEY_COL"}), hint, key_ok)
            except _GiveUp:
                self.replace(group[0], "")
                grouped.clear()
                return False
            self.replace(g, text)
            group_col(item, col)
            return True
        if group:
            for g in group[0].children[2:]:
                if isinstance(g, Token) and g.value == ",":
                    continue
                if isinstance(g, Token) and g.type not in ("ORDINAL", "NUMBER", "KEY_ALIAS"):
                    grouped.add(key_expr(g))       # a string or NULL
                    continue
                if isinstance(g, Token) and g.type == "ORDINAL" or self.literal_position(g):
                    text = g.value if isinstance(g, Token) else self.render(g)
                    digits = "".join(text.split()).lstrip("+")
                    pos = int(digits) if digits.isdigit() else 0
                    if not (1 <= pos <= len(items) and id(items[pos - 1]) in keys):
                        self.bad(f"N4: GROUP BY {text} does not name a key item")
                        if not group_pick(g, text):
                            break
                    elif keys[id(items[pos - 1])] in constants:
                        self.bad("X5: GROUP BY names a constant key item by its position")
                        self.replace(g, f"( {self.render(items[pos - 1].children[0])} )")
                        grouped.add(keys[id(items[pos - 1])])
                    else:
                        grouped.add(keys[id(items[pos - 1])])
                    continue
                name_tok = g if isinstance(g, Token) else None
                bare = None if name_tok is not None else self.bare_col(g)
                if name_tok is None and bare is not None and len(self.toks(bare)) == 1:
                    name_tok = self.toks(bare)[0]
                if name_tok is not None and name_tok.type != "ORDINAL":
                    # a bare name: a column of the FROM items first, else a key item's alias (N5)
                    name = ident(name_tok.value)
                    r = self.resolve(Tree("col", [name_tok]), scope)
                    if r is None and name in alias_of and not any(i.named(name) for i in scope.items):
                        if alias_count.get(name, 0) > 1:
                            self.bad(f"X5: GROUP BY {name_tok.value} names several SELECT items")
                            self.replace(g, f"( {self.render(alias_of[name].children[0])} )")
                        elif keys[id(alias_of[name])] in constants:
                            self.bad("X5: GROUP BY names a constant key item by its alias")
                            self.replace(g, f"( {self.render(alias_of[name].children[0])} )")
                        grouped.add(keys[id(alias_of[name])])
                        continue
                    if r is None and isinstance(g, Token):
                        self.bad(f"N5: GROUP BY {name_tok.value} names neither a column nor a key item's alias")
                        if not group_pick(g, name_tok.value):
                            break
                        continue
                if bare is not None or name_tok is not None:
                    try:
                        item, col = self.column(bare if bare is not None else Tree("col", [name_tok]), scope,
                                                frozenset({"KEY_COL"}), "key column", key_ok)
                    except _GiveUp:
                        self.replace(group[0], "")
                        grouped.clear()
                        break
                    group_col(item, col)
                    continue
                grouped.add(key_expr(g))
                if self.repair and re.fullmatch(r"[+\s]*[0-9]+(\.[0-9]+)?", self.render(g).strip()):
                    self.wrap(g, lambda old: f"( {old} )")      # a number alone would be a position (N4)
        aliases = agg_aliases | key_aliases
        for clause in self.trees(node, "having_clause", "order_clause"):
            self.post(clause, scope, items, agg_aliases, key_aliases, used, key_ok)
        missing = []
        for identity, text in used:
            if identity not in grouped:
                if text is None:               # a key expression: GROUP BY it as written (a number: not a position)
                    text = f"( {self.render(exprs[identity][0])} )"
                if text not in missing:
                    missing.append(text)
                grouped.add(identity)
        if missing:
            self.bad(f"N2: {', '.join(missing)} used but not in GROUP BY")
            names = " , ".join(missing)
            if group and id(group[0]) not in self.sub:
                self.wrap(group[0], lambda old: f"{old} , {names}")
            else:
                anchor = where[0] if where else frm
                self.wrap(anchor, lambda old: f"{old} GROUP BY {names} ")
        del aliases
        # V5: a WHERE (with what it inlines) that keeps a key column to literals keeps some of its domain
        narrow = self.narrowing(where[0] if where else None, scope)
        for k in grouped:
            col = key_cols.get(k)
            item = next((i for i in scope.items if i.id == k[0]), None)
            if col is None or col.dom is None or item is None or item.rel.kind == "public" or col.origin is None:
                continue
            entries = [e for e in narrow if e[0] == col.origin]
            keep = [e[2] for e in entries if e[3]]
            left = {v for v in col.dom if all(v in kv for kv in keep)
                    and not any(v in e[2] for e in entries if not e[3])}
            if not left and entries:
                self.bad(f"V5: WHERE keeps none of the domain of the key {col.name}")
                for e in entries:
                    c = next(t for t in e[1].iter_subtrees_topdown() if t.data == "col")
                    self.replace(e[1], f"{self.render(c)} IS NOT NULL")
        # V2/X4: the product of the keys' public domains (when every key has one)
        sizes = {k: doms.get(k) for k in grouped}
        while sizes and all(v is not None for v in sizes.values()) and math.prod(sizes.values()) > self.max_groups():
            self.bad("V2: the keys' public domains give too many groups")
            big = max((k for k in sizes if k[0] == "expr" and sizes[k] > 1), key=lambda k: sizes[k], default=None)
            if big is None:
                break
            try:
                text, _, _ = self.pick(scope, frozenset({"KEY_COL"}), "k", key_ok)
            except _GiveUp:
                break
            for n in exprs[big]:
                self.replace(n, f"{text} IS NULL")
            sizes[big] = 2
        aggs = [t for c in (*items, *self.trees(node, "having_clause", "order_clause"))
                for t in c.iter_subtrees_topdown() if t.data == "aggregate"]
        sample = [a for a in aggs if a.children[0].type == "SAMPLE_FN"]
        apart = [a for a in aggs if a.children[0].type in ("QUANTILE_FN", "PERCENTILE_FN", "QUANTILE_OF")
                 or self.distinct_of_column(a, scope)]
        if sample and apart:
            self.bad("V4: a sample-and-aggregate function beside a quantile or COUNT(DISTINCT column)")
            for a in sample:
                self.replace(a, "COUNT(*)")
        return outputs

    def distinct_of_column(self, agg: Tree, scope: Scope) -> bool:
        """COUNT(DISTINCT c) of a column c other than the unit."""
        kids = agg.children
        if not (kids[0].value.upper() == "COUNT" and len(kids) > 2 and isinstance(kids[2], Token)
                and kids[2].value.upper() == "DISTINCT"):
            return False
        r = self.resolve(self.col_of(kids[3]), scope)
        return r is None or not scope.is_unit(*r)

    def reads_column(self, node) -> bool:
        return isinstance(node, Tree) and any(t.data == "col" for t in node.iter_subtrees())

    def max_groups(self) -> int:
        """V2: 1,000,000 groups; 100,000 (the policy's max_released_rows) without a LIMIT of at most that."""
        if self.tree.children[0].data == "distinct_statement":
            return 100_000          # the LIMIT acts on the distinct rows, after the groups are released
        limits = [int(t.value) for t in self.tree.scan_values(lambda v: isinstance(v, Token) and v.type == "COUNT_LIT")]
        return 1_000_000 if self.repair is False and limits and min(limits) <= 100_000 else 100_000

    @staticmethod
    def literal_position(g) -> bool:
        """A GROUP BY item that is a number, after unary plus signs or not: a position (N4), whatever
        rule read it."""
        while isinstance(g, Tree) and g.data == "value_unary" and g.children[0].value == "+":
            g = g.children[1]
        return isinstance(g, Token) and g.type == "NUMBER"

    def aggregate(self, agg: Tree, scope: Scope) -> None:
        head = agg.children[0]
        fn = head.value.upper()
        filters = self.trees(agg, "filter")
        kids = [c for c in agg.children if not (isinstance(c, Tree) and c.data == "filter")]
        for f in filters:
            self.condition(f.children[3], scope)
        if head.type == "SAMPLE_FN":
            args = [self.measured_arg(kids[2], scope, fn), self.measured_arg(kids[4], scope, fn)]
            for node, v in zip((kids[2], kids[4]), args):
                if max(abs(v.lo), abs(v.hi)) > SAMPLE_LIMIT:
                    self.bad(f"V4: an argument of {fn} beyond 1e15")
                    self.replace(node, "1")
            if fn.startswith("COVAR"):
                (a, b) = [a if max(abs(a.lo), abs(a.hi)) <= SAMPLE_LIMIT else V("num", Fraction(1), Fraction(1), True)
                          for a in args]
                w = (a.hi - a.lo) * (b.hi - b.lo) / (4 if fn == "COVAR_POP" else 2)
                if w > SAMPLE_LIMIT:
                    self.bad(f"V4: the derived range of {fn} beyond 1e15")
                    self.replace(agg, "COUNT(*)")
            return
        if fn == "COUNT":
            if isinstance(kids[2], Token) and kids[2].value == "*":
                return
            if isinstance(kids[2], Token) and kids[2].value.upper() == "DISTINCT":
                try:
                    item, col = self.column(self.col_of(kids[3]), scope, ANY_COL, "column for COUNT")
                except _GiveUp:
                    self.replace(agg, "COUNT(*)")
                    return
                if filters and not scope.is_unit(item, col):
                    self.bad("X6: FILTER on COUNT(DISTINCT <a column other than the unit>)")
                    for f in filters:
                        self.replace(f, "")
                return
            self.counted(kids[2], scope)
            return
        if head.type == "PERCENTILE_FN":
            arg = kids[kids.index(next(k for k in kids if isinstance(k, Token) and k.value.upper() == "BY")) + 1]
        else:
            arg = kids[2]
        v = self.measured_arg(arg, scope, fn)
        if head.type == "VAR_FN" and max(abs(v.lo), abs(v.hi)) >= 10 ** 17:
            self.bad(f"X3: {fn} of a value whose bounds reach 1e17")
            self.replace(arg, "1")
        if head.type in ("QUANTILE_FN", "PERCENTILE_FN", "QUANTILE_OF") and not v.lo < v.hi:
            self.bad(f"X3: {fn} of a value with a single possible value")
            self.replace(agg, "COUNT(*)")

    def measured_arg(self, node, scope: Scope, fn: str) -> V:
        """X3 for an aggregate's argument; a bare column (not an expression of it) may be a column
        that ON equates with the unit, as long as it has bounds (a per-unit aggregate)."""
        bare = self.bare_col(node)
        if bare is not None:
            r = self.resolve(bare, scope)
            if r is not None and r[1].rng is not None and r[1].family == "num" and r[1].computed is None:
                return V("num", r[1].rng[0], r[1].rng[1], r[1].whole, cols=True)
        return self.measured(node, scope, fn)

    @staticmethod
    def bare_col(node) -> Tree | None:
        """The column a value is, if it is one (in parentheses or not)."""
        while isinstance(node, Tree) and node.data == "value_atom" and len(node.children) == 3 \
                and isinstance(node.children[0], Token) and node.children[0].value == "(":
            node = node.children[1]
        if isinstance(node, Tree) and node.data in ("any_col", "key_ref", "col", "num_col"):
            return node if node.data == "col" else _Walk.col_of(node)
        return None

    def plus_name(self, node) -> str | None:
        """(*) W1: a key item written +col (unary plus signs, parentheses) is named as the column."""
        plus = False
        while isinstance(node, Tree) and (node.data == "value_unary" and node.children[0].value == "+"
                                          or node.data == "value_atom" and len(node.children) == 3
                                          and isinstance(node.children[0], Token) and node.children[0].value == "("):
            plus = plus or node.data == "value_unary"
            node = node.children[1]
        bare = self.bare_col(node) if plus else None
        return ident(self.toks(bare)[-1].value) if bare is not None else None

    def signature(self, node, scope: Scope) -> tuple:
        """A key expression as the checker compares it with GROUP BY's items (N2): its tokens, each
        column as the one it names, keywords in upper case, unary plus signs dropped."""
        out: list = []
        while isinstance(node, Tree) and node.data in ("value_atom", "row_test") and len(node.children) == 3 \
                and isinstance(node.children[0], Token) and node.children[0].value == "(":
            node = node.children[1]             # (expr) is the key expr, as GROUP BY and SELECT read it

        def walk(n) -> None:
            if isinstance(n, Token):
                v = n.value.upper()
                out.append({"CEILING": "CEIL", "INTEGER": "INT"}.get(v, v))
                return
            if n.data == "col":
                r = self.resolve(n, scope)
                out.append(("col", r[0].id, r[1].name) if r is not None else ("?", self.show(n)))
                return
            if n.data == "value_unary" and n.children[0].value == "+":
                walk(n.children[1])
                return
            for c in n.children:
                walk(c)
        walk(node)
        return tuple(out)

    def post(self, clause: Tree, scope: Scope, items, agg_aliases, key_aliases, used, key_ok) -> None:
        aliases = agg_aliases | key_aliases

        def in_arithmetic(node) -> bool:
            n = node
            while id(n) in self.parent:
                n = self.parent[id(n)]
                if n.data in ("post_sum", "post_product", "post_unary", "post_atom"):
                    return True
                if n.data in ("post_test", "order_item", "having_clause", "post_and", "post_or", "post_not"):
                    return False
            return False

        having = clause.data == "having_clause"

        def a_column(name: str) -> bool:
            """In HAVING, a name that is a column of the FROM items means the column (as in
            PostgreSQL, whose HAVING sees no SELECT aliases); in ORDER BY, the alias."""
            return having and any(i.named(name) for i in scope.items)

        def as_column(tok_or_col, node) -> None:
            colnode = tok_or_col if isinstance(tok_or_col, Tree) else Tree("col", [tok_or_col])
            r = self.resolve(colnode, scope)
            if r is not None and key_ok(*r) and not in_arithmetic(node):
                used.append(((r[0].id, r[1].name), self.ref_text(scope, *r) or r[1].name))
                return
            self.bad(f"N2: {self.show(colnode)} in {clause.data.split('_')[0].upper()} is not a key column")
            if self.parent.get(id(node)) is not None and self.parent[id(node)].data == "order_item":
                self.replace(node, "1")         # a position: in any ORDER BY, SELECT DISTINCT's too
            elif in_arithmetic(node) or isinstance(tok_or_col, Tree):
                self.replace(node, "COUNT(*)")
            else:
                self.replace(node, "'x'")

        outputs = set(aliases)        # the SELECT list's output names: AS names and bare key columns
        for it in items:
            bare = self.bare_col(it.children[0]) if it.data == "key_item" and not self.toks(it, "KEY_ALIAS") else None
            if bare is not None:
                outputs.add(ident(self.toks(bare)[-1].value))
        if not having:
            # (*) X6: in ORDER BY, a name in an aggregate's FILTER (WHERE ...) that names an output of
            # the SELECT list is qualified (sqlglot reads it as the output, PostgreSQL as the column)
            for f in [t for t in clause.iter_subtrees_topdown() if t.data == "filter"]:
                for c in [t for t in f.iter_subtrees_topdown() if t.data == "col"]:
                    toks = self.toks(c)
                    if len(toks) == 1 and ident(toks[0].value) in outputs:
                        self.bad(f"X6: {toks[0].value} in FILTER in ORDER BY is an AS name of the SELECT list")
                        r = self.resolve(c, scope)
                        text = self.ref_text(scope, *r) if r is not None else None
                        if text is not None and "." in text:
                            self.replace(c, text)
                        else:
                            self.replace(f, "")
                            break
        for node in list(clause.iter_subtrees_topdown()):
            if node.data == "aggregate":
                self.aggregate(node, scope)
                for f in self.trees(node, "filter") if self.repair and not having else []:
                    # (repair) a column the repair put in the FILTER may bear an AS name: X6 again
                    words = re.findall(r'(?<![.\w"])("(?:[^"]|"")+"|[A-Za-z_]\w*)(?![\w.]|\s*\.)',
                                       re.sub(r"\s*\.\s*", ".", self.render(f.children[3])))
                    if any(ident(w) in outputs for w in words):
                        self.replace(f, "")
            elif node.data == "key_ref":
                colnode = self.col_of(node)
                toks = self.toks(colnode)
                name = ident(toks[-1].value)
                if len(toks) == 1 and name in aliases and not a_column(name):
                    if not having and name in self.as_twice:
                        self.bad(f"N3: ORDER BY {toks[0].value} names two SELECT items")
                        whole = self.parent.get(id(node)) is not None and self.parent[id(node)].data == "order_item"
                        self.replace(node, "1" if whole else "COUNT(*)")
                    continue                                   # the alias, not the column
                try:
                    item, col = self.column(colnode, scope, frozenset({"KEY_COL"}), "key column", key_ok)
                    used.append(((item.id, col.name), self.ref_text(scope, item, col) or col.name))
                except _GiveUp:
                    self.replace(node, "COUNT(*)")
            elif node.data in ("alias_ref", "key_alias_ref"):
                tok = node.children[0]
                name = ident(tok.value)
                if not having and name in self.as_twice:
                    self.bad(f"N3: ORDER BY {tok.value} names two SELECT items")
                    # a position where the name is the whole item (SELECT DISTINCT orders by outputs only)
                    whole = self.parent.get(id(node)) is not None and self.parent[id(node)].data == "order_item"
                    self.replace(node, "1" if whole else "COUNT(*)")
                elif a_column(name):
                    as_column(tok, node)
                elif in_arithmetic(node):
                    if name not in agg_aliases:
                        self.bad(f"N3: {tok.value} in arithmetic is not an alias of an aggregate")
                        self.replace(tok, "COUNT(*)")
                elif name not in aliases:
                    as_column(tok, node)
            elif node.data == "order_item":
                first = node.children[0]
                while isinstance(first, Tree) and first.data == "post_unary" and first.children[0].value == "+":
                    first = first.children[1]
                if isinstance(first, Token) and first.type == "NUMBER":
                    if not (first.value.isdigit() and 1 <= int(first.value) <= len(items)):
                        self.bad(f"N4: ORDER BY {first.value} is not a position")
                        self.replace(first, "1")

    # -- wrappers
    @staticmethod
    def lone_paren(agg_item: Tree) -> bool:
        """An aggregate item that is one aggregate in parentheses: (COUNT(*))."""
        e = agg_item.children[0]
        while isinstance(e, Tree) and e.data == "noisy_unary" and e.children[0].value == "+":
            e = e.children[1]
        if not (isinstance(e, Tree) and e.data == "noisy_atom"):
            return False
        while isinstance(e, Tree) and e.data == "noisy_atom":
            e = e.children[1]
        return isinstance(e, Tree) and e.data == "aggregate"

    def wrapper(self, node: Tree, env: dict) -> list[Output]:
        inner_node = self.trees(node, "statement")[0]
        try:
            inner = self.statement(inner_node, env)
        except _GiveUp:
            self.replace(inner_node, "SELECT COUNT(*) AS n FROM people")
            inner = [Output("n")]
        alias_tok = self.toks(node, "TABLE_ALIAS")
        alias = ident(alias_tok[0].value) if alias_tok else None
        body = self.trees(inner_node, "query", "wrapper")
        if body and body[0].data == "wrapper" and self.trees(body[0], "limit_clause"):
            self.bad("W2: a wrapper read by another wrapper has a LIMIT or OFFSET")
            self.replace(self.trees(body[0], "limit_clause")[0], "")
        for o in inner:
            if o.name is None and o.node is not None and o.node.data == "agg_item" and self.lone_paren(o.node):
                self.bad("W1: a wrapped query's item (COUNT(*)) in parentheses alone has no AS name")
                o.name = self.fresh()
                self.wrap(o.node, lambda old, n=o.name: f"{old} AS {n}")
        seen: set[str] = set()
        for o in inner:
            if o.name is not None and o.name in seen:
                self.bad(f"W1: the wrapped query has two outputs named {o.name}")
                if o.node is None:
                    raise _GiveUp
                o.name = self.fresh()
                o.renamed = o.node.data == "wrap_item"
                if o.alias is not None:
                    self.replace(o.alias, o.name)
                else:
                    self.wrap(o.node, lambda old, n=o.name: f"{old} AS {n}")
            if o.name is not None:
                seen.add(o.name)
        items_node = self.trees(node, "wrap_items")[0]
        wrap_items = self.trees(items_node, "wrap_item")
        outputs: list[Output] = []

        def output(colnode: Tree) -> str:
            toks = self.toks(colnode)
            name = ident(toks[-1].value)
            qual = ident(toks[0].value) if len(toks) == 3 else None if len(toks) == 1 else "."  # (N5: no schema)
            names = [o.name for o in inner]
            if (qual is None or qual == alias) and names.count(name) == 1:
                return name
            self.bad(f"W1: {self.show(colnode)} is not an output of the wrapped query")
            unique = [n for n in names if n is not None and names.count(n) == 1]
            if not unique:
                o = next((o for o in inner if o.name is None and o.node is not None), None)
                if o is None:
                    raise _GiveUp
                o.name = self.fresh()
                self.wrap(o.node, lambda old, n=o.name: f"{old} AS {n}")
                unique = [o.name]
            name = unique[zlib.crc32(toks[-1].value.encode()) % len(unique)]
            self.replace(colnode, name)
            return name

        if any(isinstance(c, Token) and c.value == "*" for c in items_node.children):
            outputs = list(inner)               # *, then any named outputs after it
        for wi in wrap_items:
            name = output(self.col_of(wi.children[0]))
            alias_item = self.toks(wi, "COLUMN_ALIAS")
            source = next(o for o in inner if o.name == name)
            out_name = ident(alias_item[0].value) if alias_item else name
            outputs.append(Output(out_name, wi, alias_item[0] if alias_item else None,
                                  source.renamed or out_name != name))
        for where in self.trees(node, "wrap_where"):
            for c in [t for t in where.iter_subtrees_topdown() if t.data == "col"]:
                output(c)
        for order in self.trees(node, "wrap_order"):
            # ORDER BY names (or positions of) outputs that no wrapper renamed: the checker
            # resolves them in the aggregate query under the wrappers.
            def kept(o: Output) -> bool:
                return o.name is not None and not o.renamed and [p.name for p in outputs].count(o.name) == 1
            for oi in self.trees(order, "wrap_order_item"):
                first = oi.children[0]
                if isinstance(first, Token):
                    pos = int(first.value)
                    valid = 1 <= pos <= len(outputs) and kept(outputs[pos - 1])
                else:
                    toks = self.toks(first)
                    name = ident(toks[-1].value)
                    qual = ident(toks[0].value) if len(toks) == 3 else None if len(toks) == 1 else "."
                    mine = [o for o in outputs if o.name == name] if qual is None else []
                    names = [o.name for o in inner]
                    valid = kept(mine[0]) if mine else (qual in (None, alias) and names.count(name) == 1)
                if valid:
                    continue
                self.bad(f"W1: ORDER BY {first.value if isinstance(first, Token) else self.show(first)} is not "
                         "an output kept as it is")
                choices = [o.name for o in outputs if kept(o)]
                if not choices:
                    self.replace(order, "")
                    break
                self.replace(first, choices[len(choices) - 1])
        return outputs


def side_conditions(tree) -> str | None:
    """Check the side conditions of grammars/dpsql.lark on a parse tree (of sql_parser());
    None if all hold, else the first one that does not."""
    text = _text_of(tree)
    walk = _Walk(text, repair=False)
    try:
        walk.run(tree)
    except Violation as v:
        return str(v)
    return None


def repair_conditions(sql: str, tree) -> str:
    """Edit a grammar string so that the side conditions hold; the result is still in the grammar."""
    walk = _Walk(sql, repair=True)
    walk.run(tree)
    return walk.render()


def _text_of(tree) -> str:
    """The text a parse tree was read from, with its tokens at their positions (spaces between)."""
    toks = list(tree.scan_values(lambda v: isinstance(v, Token)))
    end = max((t.end_pos for t in toks), default=0)
    out = [" "] * end
    for t in toks:
        out[t.start_pos:t.end_pos] = list(t.value)
    return "".join(out)
