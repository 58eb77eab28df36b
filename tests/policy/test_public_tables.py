"""Fail closed on what the policy does not mention: [public] tables and undeclared.

A table the policy neither protects nor lists under [public] tables is refused (a forgotten
sensitive table, one created after the policy was written, a copy of a protected table), unless
the policy opts back into the open behaviour with undeclared = "public", which `dpsql policy
check` warns about.
"""
from __future__ import annotations

import copy

import duckdb
import pytest
from click.testing import CliRunner

import dpsql
from dpsql.demo import policy_toml
from dpsql.engines import open_engine
from dpsql.errors import PolicyError, QueryRejected
from dpsql.frontends.cli import cli
from dpsql.policy import load_policy
from dpsql.session import Session
from tests.conftest import make_people_db, policy_for
from tests.policy.test_policy import BASE


def _with(**public) -> dict:
    pol = copy.deepcopy(BASE)
    pol["public"] = public
    return pol


# -- the section -------------------------------------------------------------------------------------

def test_default_refuses_everything_undeclared():
    p = load_policy(BASE)
    assert p.public.tables == frozenset() and p.public.undeclared == "refuse"
    assert not p.is_public("regions") and not p.is_public("main.regions")


def test_listed_tables_are_public_case_insensitively():
    p = load_policy(_with(tables=["Regions", "main.Lookup"]))
    assert p.is_public("regions") and p.is_public("REGIONS".lower()) and p.is_public("main.lookup")
    assert not p.is_public("other")


def test_protected_tables_are_never_public_even_when_undeclared_is_public():
    pol = _with(undeclared="public")
    p = load_policy(pol)
    for name in p.tables:
        assert not p.is_public(name)
    assert p.is_public("anything_else")


def test_a_protected_source_is_not_public():
    pol = policy_for(__import__("pathlib").Path("/tmp"))
    pol["tables"]["people"]["source"] = "raw_people"
    pol["public"] = {"undeclared": "public"}
    p = load_policy(pol)
    assert not p.is_public("raw_people") and not p.is_public("main.raw_people")


@pytest.mark.parametrize("public, key", [
    ({"tables": "regions"}, "public.tables"),
    ({"tables": [1]}, "public.tables"),
    ({"tables": [""]}, "public.tables"),
    ({"undeclared": "yes"}, "public.undeclared"),
    ({"undeclared": True}, "public.undeclared"),
    ({"tabels": []}, "public.tabels"),
])
def test_bad_sections_name_the_key(public, key):
    with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
        load_policy(_with(**public))


def test_a_table_cannot_be_both_protected_and_public():
    name = next(iter(BASE["tables"]))
    with pytest.raises(PolicyError, match="is a protected table"):
        load_policy(_with(tables=[name.upper()]))


# -- queries -----------------------------------------------------------------------------------------

@pytest.fixture
def db(tmp_path):
    path = make_people_db(str(tmp_path / "p.duckdb"), people=200)
    con = duckdb.connect(path)
    con.execute("CREATE TABLE secrets AS SELECT person_id, income FROM people")   # forgotten copy
    con.close()
    return path


def _connect(db, pol):
    return dpsql.connect(db, policy=pol, analyst="alice")


def test_undeclared_table_is_refused_with_the_reason(db, tmp_path):
    with _connect(db, policy_for(tmp_path)) as conn:
        cur = conn.cursor()
        with pytest.raises(QueryRejected, match="does not declare it public") as info:
            cur.execute("SELECT person_id, income FROM secrets")
        assert "[public] tables" in info.value.hint
        cur.execute("SELECT state, region FROM regions ORDER BY state")        # declared public
        assert cur.fetchall() == [("CA", "West"), ("NY", "East"), ("TX", "South")]


def test_refusal_does_not_reveal_whether_an_undeclared_table_exists(db, tmp_path):
    with _connect(db, policy_for(tmp_path)) as conn:
        cur = conn.cursor()
        messages = []
        for name in ("secrets", "no_such_table_at_all"):
            with pytest.raises(QueryRejected) as info:
                cur.execute(f"SELECT * FROM {name}")
            messages.append(str(info.value).replace(name, "T"))
        assert messages[0] == messages[1]


def test_undeclared_tables_in_joins_and_subqueries_are_refused(db, tmp_path):
    with _connect(db, policy_for(tmp_path)) as conn:
        cur = conn.cursor()
        for sql in ("SELECT r.state FROM regions r JOIN secrets s ON true",
                    "SELECT state FROM regions WHERE state IN (SELECT CAST(person_id AS TEXT) FROM secrets)",
                    "WITH x AS (SELECT * FROM secrets) SELECT count(*) FROM x"):
            with pytest.raises(QueryRejected):
                cur.execute(sql)


def test_undeclared_public_restores_the_open_behaviour(db, tmp_path):
    pol = policy_for(tmp_path)
    pol["public"] = {"undeclared": "public"}
    with _connect(db, pol) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM secrets")
        assert cur.fetchone() == (200,)
        with pytest.raises(QueryRejected):                 # protected tables stay protected
            cur.execute("SELECT income FROM people")


def test_session_tables_lists_only_protected_and_public(db, tmp_path):
    with Session.open(db, policy_for(tmp_path), "alice") as s:
        names = set(s.tables())
    assert "regions" in names and {"people", "visits", "people_pk"} <= names
    assert "secrets" not in names and "people_view" not in names


def test_a_table_created_after_the_session_opened_is_refused(tmp_path):
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE people (person_id BIGINT NOT NULL, age INTEGER)")
    pol = {"budget": {"epsilon": 10, "ledger": str(tmp_path / "l.sqlite")},
           "tables": {"people": {"privacy_unit": "person_id", "columns": {"age": {"lower": 0, "upper": 120}}}}}
    with Session(open_engine(con), load_policy(pol), "alice") as s:
        con.execute("CREATE TABLE later AS SELECT 1 AS x")
        with pytest.raises(QueryRejected, match="does not declare it public"):
            s.execute("SELECT x FROM later")


# -- dpsql policy check ------------------------------------------------------------------------------

def test_policy_check_warns_about_undeclared_public(tmp_path, db, monkeypatch):
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    pol = policy_for(tmp_path)
    path = tmp_path / "p.toml"
    path.write_text(policy_toml(pol))
    res = runner.invoke(cli, ["policy", "check", str(path), "-d", db])
    assert res.exit_code == 0, res.output
    assert "neither protected nor public" in res.stderr and "secrets" in res.stderr
    assert "undeclared" not in res.stderr

    pol["public"] = {"tables": ["regions", "gone"], "undeclared": "public"}
    path.write_text(policy_toml(pol))
    res = runner.invoke(cli, ["policy", "check", str(path)])
    assert res.exit_code == 0 and 'warning:' in res.stderr and "public.undeclared" in res.stderr
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("undeclared"))
    assert f"line {line}: public.undeclared" in res.stderr
    res = runner.invoke(cli, ["policy", "check", str(path), "-d", db])
    assert res.exit_code == 0
    assert "'gone' is not a base table" in res.stderr and "secrets" in res.stderr
