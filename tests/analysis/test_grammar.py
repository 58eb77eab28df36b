"""The grammar (grammars/dpsql.lark) and the query checker agree.

1. Every query drawn from the grammar that meets its side conditions is accepted.
2. Mutants of grammar queries (a token dropped, duplicated, swapped or replaced, or a
   forbidden construct inserted) that the grammar rejects are refused by the checker.
3. docs/SUBSET.md is exactly what grammars/gen_docs.py makes from the grammar.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark
from lark.exceptions import LarkError
from lark.lexer import PatternStr
from sqlglot import exp

from dpsql.analysis.analyze import PublicQuery
from dpsql.analysis.plan import QueryPlan
from dpsql.errors import QueryRejected

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = ROOT / "grammars" / "dpsql.lark"

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])

# Constructs the subset forbids; a mutation inserts one, or puts one in place of a token.
FORBIDDEN = [
    "*", "MIN(age)", "MAX(income)", "COUNT(*) OVER ()", "OVER ()", "(SELECT 1)",
    "(SELECT COUNT(*) FROM people)", "EXISTS (SELECT 1)", "CAST(age AS INT)", "TRY_CAST(age AS INT)",
    "age / 0", "age + 1", "UNION SELECT 1", "; DROP TABLE people", "lower(state)",
    "DISTINCT", "COUNT(DISTINCT age)", "name", "person_id", "SUM(household)", "JOIN people q ON TRUE",
    "QUALIFY TRUE", "read_csv('x.csv')", "error('x')", "regexp_matches(state, 'a')", "ESCAPE '!'",
    "1e400", "'a'", "WITH t AS (SELECT 1)", "age = income + 1", "state = 1", "age = 'a'",
    "visit_date = '2020-01-01'", "GROUP BY person_id", "ORDER BY name", "HAVING MIN(age) > 1",
    "LIMIT age", "p.x", "q.age", "abs(age)", "age % 2", "age || 'x'", "?", "$1",
]


_ASCII = st.characters(min_codepoint=32, max_codepoint=126)


def _spaced(s: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return s.map(lambda v: f" {v} ")


def _any_case(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda ups: "".join(c.upper() if u else c.lower() for c, u in zip(word, ups)))


def _shared_pick(names: tuple[str, ...], key: str) -> st.SearchStrategy[str]:
    """Two names per example, each drawn once: repeated uses agree more often (side conditions)."""
    a = st.shared(st.sampled_from(names), key=key + "-a")
    b = st.shared(st.sampled_from(names), key=key + "-b")
    return st.one_of(a, b)


_STRING_CHARS = st.sampled_from(list("abcXYZ 019%_") + ["''"])
_TEXT = st.lists(_STRING_CHARS, max_size=8).map(lambda cs: "'" + "".join(cs) + "'")
_DATES = st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2100, 12, 31)).map(lambda d: f"'{d.isoformat()}'")
_NUMBERS = st.one_of(
    st.integers(0, 1000).map(str),
    st.integers(0, 10**18 - 1).map(str),
    st.tuples(st.integers(0, 10**6), st.integers(0, 999_999)).map(lambda t: f"{t[0]}.{t[1]:06d}".rstrip("0").rstrip(".")),
)


def _explicit(parser: Lark, TERMINALS: dict[str, tuple[str, ...]]) -> dict[str, st.SearchStrategy[str]]:
    """A strategy for every terminal: policy names for the semantic ones, the rest by pattern.

    Every token is padded with spaces (from_lark only sometimes draws ignored whitespace).
    """
    semantic = {
        "TABLE": st.sampled_from(TERMINALS["TABLE"]),
        "TABLE_ALIAS": st.sampled_from(TERMINALS["TABLE_ALIAS"]),
        "QUALIFIER": st.shared(st.sampled_from(TERMINALS["QUALIFIER"]), key="qualifier"),
        "KEY_COL": _shared_pick(TERMINALS["KEY_COL"], "key"),
        "ALIAS": _shared_pick(TERMINALS["ALIAS"], "alias"),
        "KEY_ALIAS": _shared_pick(TERMINALS["KEY_ALIAS"], "key-alias"),
        "NUMBER": _NUMBERS,
        "ORDINAL": st.sampled_from(["1", "2", "3"]),
        "COUNT_LIT": st.integers(0, 100).map(str),
        "STRING": _TEXT,
        "DATE_STRING": _DATES,
        "WS": st.just(" "),
        "COMMENT": st.sampled_from(["/* note */", "-- note\n"]),
    }
    out = {}
    for t in parser.terminals:
        if t.name in semantic:
            s = semantic[t.name]
        elif t.name in TERMINALS:
            s = st.sampled_from(TERMINALS[t.name])
        elif isinstance(t.pattern, PatternStr) and "i" in t.pattern.flags:
            s = _any_case(t.pattern.value)
        else:  # punctuation, operators and keyword alternatives: printable ASCII only
            s = st.from_regex(t.pattern.to_regexp(), fullmatch=True, alphabet=_ASCII)
        out[t.name] = _spaced(s)
    return out


_TOKEN = re.compile(r"'(?:[^']|'')*'|[0-9]+(?:\.[0-9]+)?|[A-Za-z_][A-Za-z0-9_]*|<=|>=|<>|!=|==|[^\sA-Za-z0-9_]")


def tokenize(sql: str) -> list[str]:
    sql = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)
    return _TOKEN.findall(sql)


def _accepts(parser: Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except LarkError:
        return False
    return True


@pytest.fixture(scope="module")
def queries(parser, terminals):
    return from_lark(parser, start="start", explicit=_explicit(parser, terminals))


# ----------------------------------------------------------------------------- 1. grammar => accepted

@PROPERTY
@given(data=st.data())
def test_grammar_queries_are_accepted(data, queries, parser, checker, conditions):
    sql = data.draw(queries)
    tree = parser.parse(sql)          # drawn from the grammar, so it parses
    problem = conditions(tree)
    note(f"side conditions: {problem or 'hold'}")
    assume(problem is None)
    result = checker(sql)
    assert isinstance(result, QueryPlan), f"not a private query plan: {result!r}"


# ----------------------------------------------------------------------------- 2. not grammar => rejected

_MUTATIONS = ("drop", "duplicate", "swap", "replace", "insert")


@PROPERTY
@given(data=st.data())
def test_mutants_outside_the_grammar_are_rejected(data, queries, parser, checker):
    toks = tokenize(data.draw(queries))
    how = data.draw(st.sampled_from(_MUTATIONS))
    i = data.draw(st.integers(0, len(toks) - 1))
    if how == "drop":
        toks = toks[:i] + toks[i + 1:]
    elif how == "duplicate":
        toks = toks[:i + 1] + toks[i:]
    elif how == "swap":
        j = data.draw(st.integers(0, len(toks) - 1))
        toks[i], toks[j] = toks[j], toks[i]
    else:
        bad = tokenize(data.draw(st.sampled_from(FORBIDDEN)))
        toks = toks[:i] + bad + toks[i + (how == "replace"):]
    mutant = " ".join(toks)
    note(f"{how}: {mutant}")
    if _accepts(parser, mutant):
        return                         # still in the grammar: test 1's business
    try:
        result = checker(mutant)
    except QueryRejected:
        return
    # A statement that reads no table at all is passed through as a public query
    # (analyze's PublicQuery): outside the subset but reading no data. Anything else is a
    # disagreement.
    assert isinstance(result, PublicQuery) and result.tree.find(exp.Table) is None, (
        f"the grammar rejects but the checker accepts: {mutant!r} -> {type(result).__name__}")


# ----------------------------------------------------------------------------- 3. the docs

def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "grammars" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_subset_doc_is_generated_from_the_grammar():
    expected = _gen_docs().render(GRAMMAR.read_text(encoding="utf-8"))
    actual = (ROOT / "docs" / "SUBSET.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/SUBSET.md is stale: run `python grammars/gen_docs.py`"
