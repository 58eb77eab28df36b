"""The policy's [reconstruction], [server] and [analysts.NAME] sections."""
from __future__ import annotations

import copy

import pytest

import dpsql
from dpsql.policy import DEFAULT_CACHE_LIFETIME, DEFAULT_SURCHARGE, load_policy
from tests.policy.test_policy import BASE

VERIFIER = "SCRAM-SHA-256$4096:c2FsdHNhbHQ=$c3RvcmVka2V5c3RvcmVka2V5:c2VydmVya2V5c2VydmVya2V5"


def with_sections(**sections) -> dict:
    pol = copy.deepcopy(BASE)
    pol.update(sections)
    return pol


def test_defaults_when_the_sections_are_absent():
    p = load_policy(BASE)
    r = p.reconstruction
    assert (r.surcharge, r.max_subset_queries, r.cache_lifetime, r.audit_log) == \
        (DEFAULT_SURCHARGE, None, DEFAULT_CACHE_LIFETIME, None)
    assert p.server.auth == "scram-sha-256" and p.server.tls_cert is None
    assert (p.server.max_connections, p.server.max_connections_per_analyst) == (64, 16)
    assert p.analysts == {} and p.budget_for("anyone") == p.budget
    assert (p.limits.max_released_cells, p.limits.max_quantile_work) == (2_000_000, 1_000_000)
    lim = load_policy(with_sections(limits={"max_released_cells": 7, "max_quantile_work": 9})).limits
    assert (lim.max_released_cells, lim.max_quantile_work) == (7, 9)


@pytest.mark.parametrize("given, seconds", [(3600, 3600.0), ("90s", 90.0), ("12h", 43200.0), ("30d", 2592000.0),
                                            ("2w", 1209600.0), ("1.5h", 5400.0), (0, 0.0)])
def test_cache_lifetime_takes_seconds_or_a_duration(given, seconds):
    assert load_policy(with_sections(reconstruction={"cache_lifetime": given})).reconstruction.cache_lifetime == seconds


def test_reconstruction_values(tmp_path):
    p = load_policy(with_sections(reconstruction={"surcharge": 0.25, "max_subset_queries": 3,
                                                  "audit_log": "audit.jsonl"}))
    assert p.reconstruction.surcharge == 0.25 and p.reconstruction.max_subset_queries == 3
    assert p.reconstruction.audit_log.name == "audit.jsonl" and p.reconstruction.audit_log.is_absolute()
    assert load_policy(with_sections(reconstruction={"max_subset_queries": "auto"})).reconstruction \
        .max_subset_queries is None


def test_per_analyst_budget_overrides_the_default_one():
    p = load_policy(with_sections(analysts={"alice": {"epsilon": 2.5, "password": VERIFIER},
                                            "bob": {"delta": 1e-7}}))
    assert p.budget_for("alice").epsilon == 2.5 and p.budget_for("alice").delta == p.budget.delta
    assert p.budget_for("bob").epsilon == p.budget.epsilon and p.budget_for("bob").delta == 1e-7
    assert p.budget_for("carol") == p.budget
    assert p.analysts["alice"].password == VERIFIER


@pytest.mark.parametrize("sections, key, problem", [
    ({"reconstruction": {"surcharge": -1}}, "reconstruction.surcharge", "negative"),
    ({"reconstruction": {"max_subset_queries": 2.5}}, "reconstruction.max_subset_queries", "auto"),
    ({"reconstruction": {"max_subset_queries": -1}}, "reconstruction.max_subset_queries", "auto"),
    ({"reconstruction": {"cache_lifetime": "soon"}}, "reconstruction.cache_lifetime", "duration"),
    ({"reconstruction": {"cache_lifetime": -5}}, "reconstruction.cache_lifetime", "negative"),
    ({"reconstruction": {"surcharges": 1}}, "reconstruction.surcharges", "unknown key"),
    ({"server": {"auth": "md5"}}, "server.auth", "one of"),
    ({"server": {"tls_cert": "c.pem"}}, "server.tls_key", "both"),
    ({"server": {"max_message_bytes": 10}}, "server.max_message_bytes", "1024"),
    ({"server": {"max_connections": 0}}, "server.max_connections", "from 1"),
    ({"server": {"max_connections": 8, "max_connections_per_analyst": 9}}, "server.max_connections_per_analyst",
     "max_connections (8)"),
    ({"server": {"max_connections_per_analyst": True}}, "server.max_connections_per_analyst", "whole number"),
    ({"analysts": {"alice": {"password": "hunter2"}}}, "analysts.alice.password", "never a plain-text"),
    ({"analysts": {"alice": {"epsilon": 0.01}}}, "analysts.alice.epsilon", "below defaults.epsilon"),
    ({"analysts": {"alice": {"delta": 1.0}}}, "analysts.alice.delta", "below 1"),
    ({"analysts": {"alice": {"role": "admin"}}}, "analysts.alice.role", "unknown key"),
    ({"analysts": {"bad name!": {}}}, "analysts.bad name!", "analyst name"),
    ({"limits": {"max_released_cells": 0}}, "limits.max_released_cells", "whole number from 1 to 1000000000"),
    ({"limits": {"max_released_cells": 2.5e6}}, "limits.max_released_cells", "whole number"),
    ({"limits": {"max_quantile_work": True}}, "limits.max_quantile_work", "whole number"),
    ({"limits": {"max_quantile_work": 10**10}}, "limits.max_quantile_work", "to 1000000000"),
    ({"limits": {"max_quantile_items": 5}}, "limits.max_quantile_items", "unknown key"),
])
def test_malformed_sections_name_key_and_problem(sections, key, problem):
    with pytest.raises(dpsql.PolicyError) as info:
        load_policy(with_sections(**sections))
    assert key in str(info.value) and problem in str(info.value), str(info.value)


def test_the_session_charges_against_the_analysts_own_budget(tmp_path, people_db):
    from tests.conftest import policy_for
    pol = policy_for(tmp_path, epsilon=10.0)
    pol["analysts"] = {"alice": {"epsilon": pol["defaults"]["epsilon"]}}
    with dpsql.connect(people_db, policy=pol, analyst="alice") as conn:
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM people")
        with pytest.raises(dpsql.BudgetExhausted):
            cur.execute("SELECT SUM(income) FROM people")
        assert cur.execute("SHOW dpsql.budget").fetchone()[2] == 0.0
    with dpsql.connect(people_db, policy=pol, analyst="bob") as conn:     # bob has the shared 10
        assert conn.cursor().execute("SHOW dpsql.budget").fetchone()[2] == 10.0
