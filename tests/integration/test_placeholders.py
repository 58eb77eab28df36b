"""Every placeholder style binds on every engine: ?, $n (which the postgres dialect reads as a
Parameter, not a Placeholder), :name, and psycopg's %s and %(name)s (with %% a literal percent);
values are bound as quoted literals, never formatted into the text; a placeholder without a
value is refused."""
from __future__ import annotations

import pytest

import dpsql
from dpsql.noise.rng import SeededRng
from tests.conftest import policy_for

AGE_STATE = "SELECT COUNT(*) FROM people WHERE age > 30 AND state = 'CA'"


@pytest.mark.parametrize("sql, params, literal", [
    ("SELECT COUNT(*) FROM people WHERE age > ? AND state = ?", [30, "CA"], AGE_STATE),
    ("SELECT COUNT(*) FROM people WHERE age > $1 AND state = $2", [30, "CA"], AGE_STATE),
    ("SELECT COUNT(*) FROM people WHERE state = $2 AND age > $1", [30, "CA"],
     "SELECT COUNT(*) FROM people WHERE state = 'CA' AND age > 30"),
    ("SELECT COUNT(*) FROM people WHERE age > :age AND state = :st", {"age": 30, "st": "CA"}, AGE_STATE),
    ("SELECT COUNT(*) FROM people WHERE age > %s AND state = %s", [30, "CA"], AGE_STATE),
    ("SELECT COUNT(*) FROM people WHERE age > %(age)s AND state = %(st)s", {"age": 30, "st": "CA"}, AGE_STATE),
    # %% is one literal percent, in code and in strings, as psycopg reads it
    ("SELECT COUNT(*) FROM people WHERE state LIKE 'C%%' AND age > %s", [30],
     "SELECT COUNT(*) FROM people WHERE state LIKE 'C%' AND age > 30"),
    # a value is quoted by dpsql: its quotes are data, not SQL
    ("SELECT COUNT(*) FROM people WHERE state = %s", ["CA' OR 'x' = 'x"],
     "SELECT COUNT(*) FROM people WHERE state = 'CA'' OR ''x'' = ''x'"),
    ("SELECT COUNT(*) FROM people WHERE state = ?", ["CA'; DROP TABLE people; --"],
     "SELECT COUNT(*) FROM people WHERE state = 'CA''; DROP TABLE people; --'"),
    # %s inside a string literal is text, not a placeholder
    ("SELECT COUNT(*) FROM people WHERE state <> '%s' AND age > %s", [30],
     "SELECT COUNT(*) FROM people WHERE state <> '%s' AND age > 30"),
])
def test_placeholders_bind_as_literals(target, tmp_path, sql, params, literal):
    pol = policy_for(tmp_path)
    with dpsql.connect(target, policy=pol, analyst="alice", rng=SeededRng(1)) as conn:
        cur = conn.cursor()
        cur.execute(sql, params)
        first = cur.fetchall()
        # the bound query is the same query as the literal one: its repeat is the cached answer
        assert cur.execute(literal).fetchall() == first
        assert cur.cached


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) FROM people WHERE age > $1",
                                 "SELECT COUNT(*) FROM people WHERE age > ?",
                                 "SELECT COUNT(*) FROM people WHERE age > %s",
                                 "SELECT COUNT(*) FROM people WHERE age > %(age)s"])
def test_a_placeholder_without_a_value_is_refused(target, tmp_path, sql):
    with dpsql.connect(target, policy=policy_for(tmp_path), analyst="alice") as conn:
        with pytest.raises(dpsql.QueryRejected, match="no parameters were given"):
            conn.cursor().execute(sql)


@pytest.mark.parametrize("sql, params, message", [
    ("SELECT COUNT(*) FROM people WHERE age > %(age)s", [30], "pass a mapping for named parameters"),
    ("SELECT COUNT(*) FROM people WHERE age > %(age)s", {"years": 30}, "no value given for parameter 'age'"),
    ("SELECT COUNT(*) FROM people WHERE age > %s AND state = %s", [30], "fewer parameters than placeholders"),
    ("SELECT COUNT(*) FROM people WHERE age > %s", [30, 40], "more parameters than placeholders"),
])
def test_pyformat_mistakes_are_named(target, tmp_path, sql, params, message):
    with dpsql.connect(target, policy=policy_for(tmp_path), analyst="alice") as conn:
        with pytest.raises(dpsql.QueryRejected, match=message) as info:
            conn.cursor().execute(sql, params)
        assert "sqlglot" not in str(info.value) and "Required keyword" not in str(info.value)
