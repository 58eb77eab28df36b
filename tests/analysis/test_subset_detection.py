"""Subset-pattern detection on WHERE trees exactly as the checker stores them in plan.where."""
from __future__ import annotations

import pytest

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify as parse
from dpsql.analysis.reconstruction import SubsetPattern, classify, identity_columns
from dpsql.errors import QueryRejected
from dpsql.policy import load_policy

TYPES = {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR",
         "city": "VARCHAR", "household": "INTEGER", "visit_date": "DATE", "name": "VARCHAR"}
SCHEMA = Schema(columns={"people": TYPES, "staff": {"person_id": "BIGINT", "salary": "DOUBLE"}},
                base_tables=frozenset({"people", "staff_raw"}))
SETTINGS = Settings(epsilon=1.0, delta=1e-6, mechanism="laplace")


@pytest.fixture(scope="module")
def policy(make_policy):
    d = make_policy()
    d["tables"]["people"]["columns"]["name"] = {"identifier": True}      # an identifier column
    return load_policy(d)


@pytest.fixture(scope="module")
def where(policy):
    def build(predicate: str):
        sql = f"SELECT COUNT(*) FROM people WHERE {predicate}"
        return analyze(parse(sql, None, "duckdb").tree, policy, SCHEMA, SETTINGS).where
    return build


@pytest.fixture(scope="module")
def pattern(policy):
    """The classification the checker stores (plan.subset): columns named by their table, not the
    query's aliases, so renaming an alias cannot start a new series."""
    def build(predicate: str):
        sql = f"SELECT COUNT(*) FROM people WHERE {predicate}"
        return analyze(parse(sql, None, "duckdb").tree, policy, SCHEMA, SETTINGS).subset
    return build


def test_identity_columns(policy):
    assert identity_columns(policy.table("people")) == {"person_id", "name"}
    assert identity_columns(policy.table("staff")) == {"person_id"}


def test_no_where(policy):
    p = classify(None, policy.table("people"))
    assert p == SubsetPattern(False, (), (), None, "")
    assert p.describe() == "no subset selection by identity; population: all rows"


@pytest.mark.parametrize("predicate, kinds, selected", [
    ("person_id = 5", ("equality",), 1),
    ("5 = person_id", ("equality",), 1),
    ("(((person_id = 5)))", ("equality",), 1),
    ("NOT person_id <> 5", ("equality",), 1),
    ("person_id IN (1, 2, 3, 4)", ("in_list",), 4),
    ("person_id IN (1, 2, 2, 1)", ("in_list",), 2),          # distinct values named
    ("person_id = 1 OR person_id = 2 OR person_id = 3", ("or_chain",), 3),
    ("(person_id = 1 OR (person_id = 2 OR (person_id = 3))) OR person_id IN (4, 5)", ("or_chain",), 5),
    ("person_id = 1 OR person_id = 1", ("or_chain",), 1),
    ("person_id <> 5", ("exclusion",), 1),
    ("NOT person_id = 5", ("exclusion",), 1),
    ("NOT (person_id = 5)", ("exclusion",), 1),
    ("person_id NOT IN (1, 2, 3)", ("exclusion",), 3),
    ("NOT (person_id = 1 OR person_id = 2)", ("exclusion",), 2),
    ("person_id BETWEEN 10 AND 20", ("range",), None),
    ("person_id < 100", ("range",), None),
    ("person_id >= 100", ("range",), None),
    ("NOT person_id BETWEEN 10 AND 20", ("range",), None),
    ("person_id < 10 OR person_id > 100", ("range",), None),
    ("person_id > 10 AND person_id < 100", ("range",), None),
    ("person_id = household", ("column_comparison",), None),
    ("age < person_id", ("column_comparison",), None),
    ("person_id = 5 OR age > 30", ("mixed_or",), 1),
    ("person_id IN (1, 2) OR state = 'CA' OR person_id = 9", ("mixed_or",), 3),
    ("person_id = 1 OR person_id > 100", ("or_chain", "range"), None),
])
def test_kinds(pattern, predicate, kinds, selected):
    p = pattern(predicate)
    assert p.flagged
    assert p.kinds == kinds
    assert p.columns == ("person_id",)
    assert p.selected == selected
    assert p.population == ""


def test_identifier_column(pattern):
    p = pattern("name IN ('ann', 'bob') AND age > 30")
    assert (p.flagged, p.kinds, p.columns, p.selected, p.population) == (
        True, ("in_list",), ("name",), 2, "age > 30")
    p = pattern("name LIKE 'a%'")
    assert (p.flagged, p.kinds, p.columns) == (True, ("pattern",), ("name",))
    p = pattern("name = 'ann' OR person_id = 3")
    assert (p.kinds, p.columns, p.selected) == (("or_chain",), ("name", "person_id"), 2)


def test_city_is_not_identity(pattern):
    p = pattern("city = 'Springfield' OR city = 'Shelbyville'")
    assert not p.flagged and p.kinds == () and p.columns == () and p.selected is None
    assert p.population == "(city = 'Shelbyville' OR city = 'Springfield')"


def test_population_is_the_rest(pattern):
    p = pattern("age > 30 AND person_id IN (1, 2, 3) AND state = 'CA'")
    assert (p.flagged, p.kinds, p.selected) == (True, ("in_list",), 3)
    assert p.population == "age > 30 AND state = 'CA'"


def test_population_canonical_order(pattern):
    a = pattern("age > 30 AND state = 'CA' AND person_id = 1")
    b = pattern("person_id IN (7, 8) AND (state = 'CA' AND age > 30)")
    c = pattern("(state = 'CA') AND person_id <> 4 AND age > 30 AND age > 30")
    assert a.population == b.population == c.population == "age > 30 AND state = 'CA'"
    d = pattern("person_id = 1 AND (state = 'NY' OR age < 18) AND income > 10")
    e = pattern("(age < 18 OR state = 'NY') AND income > 10 AND person_id = 2")
    assert d.population == e.population
    assert d.population == "(age < 18 OR state = 'NY') AND income > CAST(10.0 AS DOUBLE)"


def test_not_pushed_through_or(pattern):
    p = pattern("NOT (person_id = 1 OR age > 3)")          # = person_id <> 1 AND NOT age > 3
    assert (p.flagged, p.kinds, p.selected, p.population) == (True, ("exclusion",), 1, "NOT age > 3")


def test_nested_and_inside_or(pattern):
    p = pattern("(person_id = 1 AND age > 3) OR (person_id IN (2, 3) AND state = 'CA')")
    assert (p.flagged, p.kinds, p.selected, p.population) == (True, ("or_chain",), 3, "")


def test_several_identity_conjuncts(pattern):
    p = pattern("person_id IN (1, 2, 3) AND person_id <> 2 AND age > 3")
    assert p.flagged and p.kinds == ("in_list", "exclusion") and p.selected == 3
    assert p.population == "age > 3"
    p = pattern("person_id BETWEEN 1 AND 100 AND person_id <> 50")   # difference inside a range
    assert p.kinds == ("range", "exclusion") and p.selected == 1


def test_is_null_not_flagged(pattern):
    p = pattern("person_id IS NULL")
    assert (p.flagged, p.kinds, p.columns, p.selected, p.population) == (
        False, ("is_null",), ("person_id",), None, "")
    assert "selects no unit" in p.describe()
    p = pattern("person_id IS NOT NULL AND age > 3")
    assert (p.flagged, p.kinds, p.population) == (False, ("is_not_null",), "age > 3")
    p = pattern("person_id IS NULL OR age > 3")
    assert not p.flagged
    assert pattern("person_id IS NULL OR person_id = 4").selected == 1


@pytest.mark.parametrize("predicate, population", [
    ("age > 30", "age > 30"),
    ("state = 'CA' AND age BETWEEN 20 AND 30", "age BETWEEN 20 AND 30 AND state = 'CA'"),
    ("household IN (1, 2)", "household IN (1, 2)"),
    ("NOT (age > 3 AND city = 'x')", "(NOT age > 3 OR NOT city = 'x')"),
    ("income > 10", "income > CAST(10.0 AS DOUBLE)"),
])
def test_non_identity_not_flagged(pattern, predicate, population):
    p = pattern(predicate)
    assert p == SubsetPattern(False, (), (), None, population)
    assert p.describe() == f"no subset selection by identity; population: {population}"


def test_describe(pattern):
    ids = ", ".join(str(i) for i in range(57))
    p = pattern(f"person_id IN ({ids}) AND age > 30")
    assert p.describe() == "subset selection by person_id: in_list of 57 values; population: age > 30"
    assert pattern("person_id = 5").describe() == (
        "subset selection by person_id: equality of 1 value; population: all rows")
    assert pattern("person_id < 5").describe() == (
        "subset selection by person_id: range; population: all rows")


@pytest.mark.parametrize("predicate", [
    "person_id % 2 = 0",
    "person_id * 3 < 100",
    "floor(person_id / 7) = 3",
    "mod(person_id, 5) = 1",
    "hash(person_id) % 2 = 0",
    "CAST(person_id AS VARCHAR) LIKE '%7'",
])
def test_cohen_nissim_selectors_refused_before_detection(policy, predicate):
    """Cohen & Nissim's arithmetic selectors on ids never reach the detector: WHERE admits
    no arithmetic or functions, so the subset check refuses them."""
    sql = f"SELECT COUNT(*) FROM people WHERE {predicate}"
    with pytest.raises(QueryRejected):
        analyze(parse(sql, None, "duckdb").tree, policy, SCHEMA, SETTINGS)
