"""Errors that lead somewhere: PostgreSQL's wording and position for syntax errors (never the
parser's internals), did-you-mean hints drawn from keywords, the policy and the schema (never the
data), and hints the analyst (or the policy's administrator) can act on as written."""
from __future__ import annotations

import re

import pytest

import dpsql
from dpsql.analysis.parse import classify
from dpsql.errors import SqlSyntaxError, UndefinedColumn
from tests.conftest import policy_for

INTERNALS = re.compile(r"sqlglot|Required keyword|Invalid expression|Unexpected token|<class|Expecting|"
                       r"Traceback|expressions\.", re.IGNORECASE)


@pytest.mark.parametrize("sql, near, position, hint", [
    ("SELEC COUNT(*) FROM people", "SELEC", 1, 'did you mean "SELECT"?'),
    ("SELECT COUNT(*) FRM people", "people", 21, 'did you mean "FROM"?'),
    ("SELECT COUNT(*) FROM people WHER age = 1", "age", 34, 'did you mean "WHERE"?'),
    ("SELECT state, COUNT(*) FROM people GROUP BY state HAVNG COUNT(*) > 1", "HAVNG", 51, 'did you mean "HAVING"?'),
    ("SELECT COUNT(* FROM people", "FROM", 16, None),
    ("SELECT COUNT(*), FROM people", "FROM", 18, None),
    ("SELECT COUNT(*) FROM people GROUP", "GROUP", 29, None),
    ("SELECT COUNT(*)\nFROM people\nWHERE age >> 3 GROUP", "GROUP", 44, None),
    ("FROM people SELECT COUNT(*)", "FROM", 1, None),
])
def test_syntax_error_at_or_near_with_position(sql, near, position, hint):
    with pytest.raises(SqlSyntaxError) as info:
        classify(sql)
    err = info.value
    assert str(err) == f'syntax error at or near "{near}"' and err.sqlstate == "42601"
    assert err.position == position and sql[position - 1:].startswith(near)
    assert err.hint == hint
    assert err.wire_fields()["P"] == str(position)


@pytest.mark.parametrize("sql, position", [
    ("SELECT COUNT(*) FROM people WHERE", 34),
    ("SELECT COUNT(*) FROM people WHERE age >", 40),
    ("SELECT COUNT(*) FROM people WHERE age > 1 AND", 46),
])
def test_syntax_error_at_end_of_input(sql, position):
    with pytest.raises(SqlSyntaxError) as info:
        classify(sql)
    assert str(info.value) == "syntax error at end of input" and info.value.position == position


def test_unterminated_quote_is_named_as_postgresql_does():
    with pytest.raises(SqlSyntaxError) as info:
        classify("SELECT COUNT(*) FROM people WHERE state = 'CA")
    assert str(info.value).startswith("unterminated quoted string at or near \"'CA")
    assert info.value.position == 43


def test_position_counts_in_the_text_as_written():
    """Comments before the error and an EXPLAIN DP prefix count in the position."""
    sql = "/* a comment */ SELECT COUNT(*) -- another\nFROM people GROUP"
    with pytest.raises(SqlSyntaxError) as info:
        classify(sql)
    assert sql[info.value.position - 1:].startswith("GROUP")
    sql = "EXPLAIN DP SELECT COUNT(*) FROM people GROUP"
    with pytest.raises(SqlSyntaxError) as info:
        classify(sql)
    assert sql[info.value.position - 1:].startswith("GROUP")


MALFORMED = [
    "SELECT COUNT(*) FROM people WHERE", "SELECT COUNT(*) FROM", "SELECT COUNT(*) FROM people GROUP BY",
    "SELECT COUNT(*) FROM people ORDER", "SELECT (", "SELECT COUNT(*) FROM people WHERE age IN (", "WITH x AS",
    "SELECT COUNT(*) FROM people WHERE age BETWEEN 1", "SELECT CAST(age AS) FROM people", "SELECT COUNT(*) FROM (",
    "SELECT COUNT(*) FROM people WHERE age = %", "SELECT COUNT(*) FROM people LIMIT", "SELECT a FROM t JOIN",
    "SELECT CASE WHEN FROM people", "SELECT COUNT(*) FROM people WHERE NOT", "SELEC", "FROM people SELECT 1",
    "SELECT COUNT(*) FROM people WHERE state = 'CA", "SELECT COUNT(*) FROM people /* open",
    "SELECT COUNT(*) FROM people WHERE age > 1 )", "SELECT 1 +", "SELECT 'x' || FROM t",
]


@pytest.mark.parametrize("sql", MALFORMED)
def test_no_parser_internals_in_any_syntax_error(sql):
    with pytest.raises(dpsql.ProgrammingError) as info:
        classify(sql)
    err = info.value
    for text in (str(err), err.hint or ""):
        assert not INTERNALS.search(text), text
    if isinstance(err, SqlSyntaxError):
        assert err.position is not None and 1 <= err.position <= len(sql) + 1


@pytest.fixture
def cur(people_db, tmp_path):
    with dpsql.connect(people_db, policy=policy_for(tmp_path), analyst="alice") as conn:
        yield conn.cursor()


def test_misspelt_table_and_column_suggest_names_from_policy_and_schema(cur):
    with pytest.raises(dpsql.QueryRejected) as info:
        cur.execute("SELECT COUNT(*) FROM peple")
    assert info.value.hint.startswith('did you mean "people"?') and "[public] tables" in info.value.hint
    with pytest.raises(UndefinedColumn) as info:
        cur.execute("SELECT COUNT(*) FROM people WHERE agee > 3")
    assert info.value.sqlstate == "42703" and info.value.hint == 'did you mean "age"?'
    with pytest.raises(UndefinedColumn) as info:
        cur.execute("SELECT stat, COUNT(*) FROM people p GROUP BY p.stat")
    assert info.value.hint == 'did you mean "state"?'


def test_suggestions_never_come_from_the_data(cur):
    """A string value of the data ('CA') is never offered for a misspelt word close to it."""
    with pytest.raises(dpsql.QueryRejected) as info:
        cur.execute("SELECT COUNT(*) FROM people WHERE CAA = 'x'")
    assert "CA" not in (info.value.hint or "").upper().replace("CAA", "")


def test_date_column_with_a_date_string_reads_it_as_a_date(cur):
    cur.execute("SELECT COUNT(*) FROM visits WHERE visit_date >= '2024-01-01'")
    cur.execute("EXPLAIN DP SELECT COUNT(*) FROM visits WHERE visit_date BETWEEN '2024-01-01' AND '2024-06-30'")
    assert "CAST('2024-01-01' AS DATE)" in str(cur.fetchall())


@pytest.mark.parametrize("literal", ["'2024-13-01'", "'yesterday'", "'2024-01-01 10:00'", "'01/02/2024'"])
def test_date_column_with_a_non_date_string_says_how_to_write_it(cur, literal):
    with pytest.raises(dpsql.QueryRejected) as info:
        cur.execute(f"SELECT COUNT(*) FROM visits WHERE visit_date < {literal}")
    assert "DATE 'YYYY-MM-DD'" in info.value.hint
    assert literal.strip("'") not in str(info.value)


def test_no_delta_in_the_policy_says_what_the_administrator_can_do(people_db, tmp_path):
    pol = policy_for(tmp_path)
    pol["budget"]["delta"] = 0.0
    pol.setdefault("defaults", {})["delta"] = 0.0
    with dpsql.connect(people_db, policy=pol, analyst="alice") as conn, \
            pytest.raises(dpsql.QueryRejected) as info:
        conn.cursor().execute("SELECT age, COUNT(*) FROM people GROUP BY age")
    err = info.value
    assert "the policy gives this analyst's budget no delta" in str(err)
    assert "SET dpsql.delta" not in (err.hint or "")
    assert "administrator" in err.hint and "budget.delta" in err.hint and "values" in err.hint


def test_zero_session_delta_says_which_setting_fits(cur):
    cur.execute("SET dpsql.delta = 0")
    with pytest.raises(dpsql.QueryRejected) as info:
        cur.execute("SELECT age, COUNT(*) FROM people GROUP BY age")
    assert info.value.hint.startswith("SET dpsql.delta = ")
    cur.execute(info.value.hint.split(" (")[0])
    cur.execute("SELECT age, COUNT(*) FROM people GROUP BY age")


@pytest.mark.parametrize("accountant, first", [("basic", "SET dpsql.epsilon = 0.7"), ("zcdp", "SET dpsql.epsilon = 1")])
def test_budget_refusal_says_what_is_left_and_what_fits(people_db, tmp_path, accountant, first):
    pol = policy_for(tmp_path, epsilon=1.0)
    pol["budget"]["accountant"], pol["budget"]["delta"] = accountant, 1e-6
    sql = "SELECT state, AVG(age) FROM people GROUP BY state"
    with dpsql.connect(people_db, policy=pol, analyst="alice") as conn:
        cur = conn.cursor()
        cur.execute(first)
        if accountant == "basic":
            cur.execute("SELECT COUNT(*) FROM people")
        with pytest.raises(dpsql.BudgetExhausted) as info:
            cur.execute(sql)
        hint = info.value.hint
        assert re.match(r"(epsilon|rho) [\d.e-]+ is left: SET dpsql\.(epsilon|rho) = [\d.e-]+ \(or lower\) fits", hint)
        cur.execute(re.search(r"SET dpsql\.\w+ = [\d.e-]+", hint).group(0))
        cur.execute(sql)                      # the suggested setting does fit
        assert cur.fetchall()
