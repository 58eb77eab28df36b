"""Policy loading and validation: every problem names the file, the key and what is wrong."""
from __future__ import annotations

import copy
import math

import pytest

import dpsql
from dpsql.policy import load_policy

BASE = {
    "budget": {"epsilon": 10.0, "delta": 1e-6, "ledger": "budget.sqlite"},
    "defaults": {"epsilon": 0.1, "mechanism": "laplace"},
    "tables": {"people": {"privacy_unit": "person_id", "max_rows_per_unit": 1,
                          "columns": {"age": {"lower": 0, "upper": 120},
                                      "state": {"values": ["CA", "NY"]}}}},
}


def with_change(path: str, value) -> dict:
    pol = copy.deepcopy(BASE)
    node = pol
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is KeyError:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return pol


def test_valid_policy_loads_frozen():
    p = load_policy(BASE)
    t = p.table("PEOPLE")
    assert t.privacy_unit == "person_id" and t.max_groups_per_unit == 1
    assert t.column("Age").lower == 0 and t.column("state").values == ("CA", "NY")
    assert p.defaults.delta == pytest.approx(1e-8)
    with pytest.raises(AttributeError):
        t.privacy_unit = "x"


@pytest.mark.parametrize("path, value, key, problem", [
    ("budget.epsilon", -1, "budget.epsilon", "positive"),
    ("budget.epsilon", math.inf, "budget.epsilon", "finite"),
    ("budget.epsilon", math.nan, "budget.epsilon", "finite"),
    ("budget.epsilon", "ten", "budget.epsilon", "number"),
    ("budget.epsilon", KeyError, "budget.epsilon", "missing"),
    ("budget.delta", -1e-6, "budget.delta", "negative"),
    ("budget.delta", 1.5, "budget.delta", "below 1"),
    ("budget.colour", 1, "budget.colour", "unknown key"),
    ("extra", {}, "extra", "unknown key"),
    ("defaults.epsilon", 20, "defaults.epsilon", "exceeds"),
    ("defaults.mechanism", "uniform", "defaults.mechanism", "one of"),
    ("tables.people.privacy_unit", KeyError, "tables.people.privacy_unit", "missing"),
    ("tables.people.max_rows_per_unit", 0, "tables.people.max_rows_per_unit", ">= 1"),
    ("tables.people.max_groups_per_unit", 1.5, "tables.people.max_groups_per_unit", ">= 1"),
    ("tables.people.owner", "x", "tables.people.owner", "unknown key"),
    ("tables.people.columns.age", {"lower": 5, "upper": 1}, "tables.people.columns.age", "lower <= upper"),
    ("tables.people.columns.age", {"lower": 5}, "tables.people.columns.age", "both lower and upper"),
    ("tables.people.columns.age", {"lower": 0, "upper": math.inf}, "tables.people.columns.age.upper", "finite"),
    ("tables.people.columns.age", {"lower": 0, "upper": 1, "unit": "y"}, "tables.people.columns.age.unit", "unknown"),
    ("tables.people.columns.state", {"values": []}, "tables.people.columns.state.values", "non-empty"),
    ("tables.people.columns.state", {"values": ["a", "a"]}, "tables.people.columns.state.values", "duplicates"),
    ("tables.people.columns.state", {"values": [1.5]}, "tables.people.columns.state.values", "strings or whole"),
    ("tables.people.columns.person_id", {}, "tables.people.columns.person_id", "privacy unit"),
])
def test_malformed_policy_names_key_and_problem(path, value, key, problem):
    with pytest.raises(dpsql.PolicyError) as info:
        load_policy(with_change(path, value))
    msg = str(info.value)
    assert "<dict>" in msg and key in msg and problem in msg, msg


def test_toml_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[budget]\nepsilon = = 3\n")
    with pytest.raises(dpsql.PolicyError, match=r"bad\.toml: line 2: not valid TOML: .* \(column \d+\)$"):
        load_policy(str(bad))
    with pytest.raises(dpsql.PolicyError, match="cannot read"):
        load_policy(str(tmp_path / "missing.toml"))
    good = tmp_path / "p.toml"
    good.write_text('[budget]\nepsilon = 1.0\nledger = "l.sqlite"\n[tables.t]\nprivacy_unit = "id"\n'
                    '[tables.t.columns]\nx = { lower = 0, upper = 1 }\n')
    p = load_policy(str(good))
    assert p.budget.ledger == tmp_path / "l.sqlite"     # relative to the policy file
    good.write_text('[budget]\nepsilon = 1.0\n[tables.t]\nprivacy_unit = "id"\nmax_rows = 3\n')
    with pytest.raises(dpsql.PolicyError, match=r"p\.toml: line 5: tables\.t\.max_rows: unknown key"):
        load_policy(str(good))


def test_schema_mismatch_fails_at_connect(tmp_path, people_db):
    from tests.conftest import policy_for
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["shoe_size"] = {"lower": 0, "upper": 50}
    with pytest.raises(dpsql.PolicyError, match=r"tables.people.columns.shoe_size: no such column"):
        dpsql.connect(people_db, policy=pol, analyst="a")
    pol = policy_for(tmp_path)
    pol["tables"]["ghosts"] = {"privacy_unit": "id"}
    with pytest.raises(dpsql.PolicyError, match=r"tables.ghosts: no such table"):
        dpsql.connect(people_db, policy=pol, analyst="a")
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["privacy_unit"] = "ssn"
    with pytest.raises(dpsql.PolicyError, match=r"privacy_unit: column 'ssn'"):
        dpsql.connect(people_db, policy=pol, analyst="a")
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["state"] = {"lower": 0, "upper": 1}
    with pytest.raises(dpsql.PolicyError, match=r"columns.state: bounds given but the column is not numeric"):
        dpsql.connect(people_db, policy=pol, analyst="a")
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["age"] = {"values": ["young", "old"]}
    with pytest.raises(dpsql.PolicyError, match=r"columns.age: domain values must be whole numbers"):
        dpsql.connect(people_db, policy=pol, analyst="a")


def test_dict_policy_needs_a_ledger(people_db):
    pol = copy.deepcopy(BASE)
    del pol["budget"]["ledger"]
    pol["tables"] = {}
    with pytest.raises(dpsql.PolicyError, match="budget.ledger"):
        dpsql.connect(people_db, policy=pol, analyst="a")
