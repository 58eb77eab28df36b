"""The grammar (grammars/dpsql.lark) and the query checker agree.

1. Every query drawn from the grammar (hypothesis.extra.lark, with the grammar's policy
   terminals filled from the test policy), edited so that the side conditions hold, is
   accepted: analyze returns a QueryPlan.
2. Mutants of grammar queries (a token dropped, duplicated, swapped or replaced by a
   forbidden construct, or one inserted) that are outside the subset are refused with
   QueryRejected. sqlglot is lenient about spelling, so when the checker does accept such
   a mutant, what it parsed must print as a subset query (see canonical_form); the few
   known ways in which the checker departs from the grammar are listed there, and each
   is pinned by a test at the end of this module.
3. docs/SUBSET.md is exactly what grammars/gen_docs.py makes from the grammar.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import LarkStrategy, from_lark
from lark import Lark
from lark.exceptions import LarkError
from lark.grammar import NonTerminal, Terminal
from lark.lexer import PatternStr
from sqlglot import exp

from dpsql.analysis.analyze import PublicQuery
from dpsql.analysis.parse import classify
from dpsql.analysis.plan import QueryPlan
from dpsql.errors import QueryRejected

ROOT = Path(__file__).resolve().parents[2]
GRAMMAR = ROOT / "grammars" / "dpsql.lark"

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
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


def _explicit(parser: Lark, names: dict[str, tuple[str, ...]]) -> dict[str, st.SearchStrategy[str]]:
    """A strategy for every terminal: policy names for the semantic ones, the rest by pattern.

    Every token is padded with spaces (from_lark only sometimes draws ignored whitespace).
    """
    semantic = {
        "QUALIFIER": st.sampled_from(names["QUALIFIER"]),
        "KEY_COL": _shared_pick(names["KEY_COL"], "key"),
        "ALIAS": _shared_pick(names["ALIAS"], "alias"),
        "KEY_ALIAS": _shared_pick(names["KEY_ALIAS"], "key-alias"),
        "NUMBER": _NUMBERS,
        "ORDINAL": st.sampled_from(["1", "2", "3"]),
        "COUNT_LIT": st.integers(0, 100).map(str),
        "STRING": _TEXT,
        "DATE_STRING": _DATES,
        "WS": st.just(" "),
        "COMMENT": st.sampled_from([" ", " ", " ", "/* note */", "-- note\n"]),
    }
    out = {}
    for t in parser.terminals:
        if t.name in semantic:
            s = semantic[t.name]
        elif t.name in names:
            s = st.sampled_from(names[t.name])
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


class _Bounded(LarkStrategy):
    """from_lark's strategy, with a depth cap: below `max_depth` it draws exactly as
    from_lark does; deeper, each rule takes one of its shallowest expansions. The grammar's
    nesting (parentheses in WHERE and in arithmetic) is a critical branching process, so
    unbounded draws have a heavy tail of multi-kilobyte queries that are slow to parse and
    add nothing. Every string drawn is still in the grammar's language."""

    def __init__(self, base: LarkStrategy, max_depth: int):
        self.__dict__.update(base.__dict__)
        self.max_depth, self._depth = max_depth, 0
        rules = {k: v.elements for k, v in self.nonterminal_strategies.items()}
        height: dict[str, float] = {}
        changed = True
        while changed:
            changed = False
            for name, expansions in rules.items():
                h = min(1 + max((height.get(s.name, math.inf) if isinstance(s, NonTerminal) else 0
                                 for s in e), default=0) for e in expansions)
                if h < height.get(name, math.inf):
                    height[name], changed = h, True

        def h_of(e):
            return max((height[s.name] if isinstance(s, NonTerminal) else 0 for s in e), default=0)
        self._shallow = {k: st.sampled_from([e for e in v if h_of(e) == min(map(h_of, v))])
                         for k, v in rules.items()}

    def draw_symbol(self, data, symbol, draw_state):
        if isinstance(symbol, Terminal):
            draw_state.append(data.draw(self.terminal_strategies[symbol.name]))
            return
        self._depth += 1
        start = getattr(data, "start_span", None) or data.start_example   # renamed in hypothesis 6.1xx
        stop = getattr(data, "stop_span", None) or data.stop_example
        try:
            start(self.rule_label(symbol.name))
            table = self.nonterminal_strategies if self._depth <= self.max_depth else self._shallow
            for e in data.draw(table[symbol.name]):
                self.draw_symbol(data, e, draw_state)
                self.gen_ignore(data, draw_state)
            stop()
        finally:
            self._depth -= 1

    def do_draw(self, data):
        self._depth = 0
        return super().do_draw(data)


@pytest.fixture(scope="module")
def queries(parser, terminals):
    base = from_lark(parser, start="start", explicit=_explicit(parser, terminals))
    try:
        return _Bounded(getattr(base, "wrapped_strategy", base), max_depth=12)
    except AttributeError:   # hypothesis internals moved: plain from_lark, short draws only
        return base.filter(lambda sql: len(sql) < 2000)


# ----------------------------------------------------------------------------- 1. grammar => accepted

@PROPERTY
@given(data=st.data())
def test_grammar_queries_are_accepted(data, queries, parser, checker, conditions, repair):
    drawn = data.draw(queries)
    sql = repair(drawn, parser.parse(drawn, start="start"))    # edit so that C1-C4 hold
    note(f"query: {sql}")
    problem = conditions(parser.parse(sql, start="start"))     # still in the grammar; conditions hold
    assert problem is None, problem
    result = checker(sql)
    assert isinstance(result, QueryPlan), f"not a private query plan: {result!r}"


# ----------------------------------------------------------------------------- 2. not grammar => rejected

_MUTATIONS = ("drop", "duplicate", "swap", "replace", "replace", "insert")


def mutate(data, toks: list[str]) -> tuple[str, str]:
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
    return how, " ".join(toks)


@PROPERTY
@given(data=st.data())
def test_mutants_outside_the_subset_are_rejected(data, queries, parser, checker, conditions, terminals):
    how, mutant = mutate(data, tokenize(data.draw(queries)))
    note(f"{how}: {mutant}")
    if in_subset(parser, conditions, mutant):
        return                         # still in the subset: test 1's business
    try:
        result = checker(mutant)
    except QueryRejected:
        return
    if isinstance(result, PublicQuery):
        # A statement that reads no table at all is passed through as a public query:
        # outside the subset, but it reads no data.
        assert result.tree.find(exp.Table) is None, f"public query reads a table: {mutant!r}"
        return
    assert isinstance(result, QueryPlan)
    canonical = canonical_form(classify(mutant).tree, parser, terminals["UNIT"][0])
    assert in_subset(parser, conditions, canonical), (
        f"the checker accepts a query outside the subset: {mutant!r} (canonical form {canonical!r})")


def in_subset(parser: Lark, conditions, sql: str) -> bool:
    """In the grammar's language, and meeting its side conditions."""
    try:
        tree = parser.parse(sql, start="start")
    except LarkError:
        return False
    return conditions(tree) is None


def canonical_form(tree: exp.Expression, parser: Lark, unit: str) -> str:
    """What the checker accepted, as sqlglot prints it, minus the known harmless leniencies.

    sqlglot is lenient about spelling (stray commas, a dangling AS, keywords as aliases),
    so the checker accepts texts the grammar rejects; what it accepted must then be a
    spelling of a subset query. Its printed form drops the stray syntax; beyond that we
    remove exactly these, none of which reaches the engine (the rewrite rebuilds the
    query from the plan: the table by name, WHERE from the checked predicate, keys and
    aggregates by column):

    * GROUP BY DISTINCT (the same keys);
    * a WHERE of TRUE/FALSE alone, replaced by `<unit> IS NULL` so the rest is checked;
    * HAVING and ORDER BY expressions beyond the grammar (comparisons used as numbers,
      AND/OR of non-booleans, ...): they are evaluated on released noisy values, i.e.
      post-processing, which cannot weaken the guarantee. Every aggregate in them must
      still be one the grammar allows.
    """
    tree = tree.copy()
    group = tree.args.get("group")
    if group is not None:
        group.set("all", None)
    where = tree.args.get("where")
    if where is not None:
        for node in list(where.find_all(exp.Boolean)):
            node.replace(exp.Is(this=exp.column(unit), expression=exp.Null()))
    for clause in ("having", "order"):
        node = tree.args.get(clause)
        if node is None:
            continue
        for agg in node.find_all(exp.AggFunc):
            try:
                parser.parse(agg.sql("duckdb"), start="aggregate")
            except LarkError:
                return tree.sql("duckdb")          # an aggregate the grammar refuses: keep it
        tree.set(clause, None)
    return tree.sql("duckdb")


# ----------------------------------------------------------------------------- former disagreements
# Each was a way the checker departed from the grammar; the checker now refuses them.

@pytest.mark.parametrize("sql", ["SELECT state, COUNT(*) FROM people GROUP BY 1.5",
                                 "SELECT COUNT(*) FROM people ORDER BY 1.5"])
def test_fractional_position_is_refused(checker, sql):
    with pytest.raises(QueryRejected):
        checker(sql)


def test_malformed_number_after_where_is_refused(checker):
    with pytest.raises(QueryRejected):
        checker("SELECT COUNT(*) * . 1.5 FROM people")


@pytest.mark.parametrize("where", ["'a' <> ''", "1 = 1"])
def test_constant_where_is_refused(checker, where):
    with pytest.raises(QueryRejected):
        checker(f"SELECT COUNT(*) FROM people WHERE {where}")


def test_empty_group_by_is_refused(checker):
    with pytest.raises(QueryRejected):
        checker("SELECT COUNT(*) FROM people GROUP BY")


def test_table_alias_column_list_is_refused(checker):
    with pytest.raises(QueryRejected):
        checker("SELECT SUM(income) FROM people AS t(income)")


def test_between_symmetric_is_refused(checker):
    with pytest.raises(QueryRejected, match="SYMMETRIC"):
        checker("SELECT COUNT(*) FROM people WHERE age BETWEEN SYMMETRIC 60 AND 20")


def test_limit_percent_is_refused(checker):
    with pytest.raises(QueryRejected):
        checker("SELECT COUNT(*) FROM people LIMIT 10%")


def test_comment_markers_inside_strings(checker, parser):
    sql = "SELECT COUNT(*) FROM people WHERE city LIKE '%--%'"
    parser.parse(sql, start="start")                    # in the grammar
    assert isinstance(checker(sql), QueryPlan)


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
