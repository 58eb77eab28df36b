"""Shared fixtures: a small DuckDB database with people/visits and a policy for it."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import duckdb
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

ENGINES = ["duckdb"]   # later: "postgres", "spark"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/* from the current output")


@pytest.fixture(scope="session")
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


def make_people_db(path: str, people: int = 2000, *, pk: bool = True) -> str:
    """A small deterministic database: people (and people_pk), visits, and a public table."""
    from dpsql.datagen import generate
    con = duckdb.connect(path)
    generate(con, people, seed=0, primary_key_copy=pk)
    con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('CA', 'West'), ('NY', 'East'), "
                "('TX', 'South')) t(state, region)")
    con.execute("CREATE VIEW people_view AS SELECT * FROM people")
    con.close()
    return path


def policy_for(tmp_path, **overrides) -> dict:
    from dpsql.datagen import demo_policy
    pol = demo_policy(ledger=str(tmp_path / "ledger.sqlite"))
    pol["budget"]["epsilon"] = overrides.pop("epsilon", 100.0)
    pk = dict(pol["tables"]["people"])
    pk["columns"] = dict(pk["columns"])
    pol["tables"]["people_pk"] = pk
    for k, v in overrides.items():
        pol[k] = v
    return pol


@pytest.fixture(scope="session")
def people_db(tmp_path_factory) -> str:
    return make_people_db(str(tmp_path_factory.mktemp("db") / "people.duckdb"))


@pytest.fixture
def policy(tmp_path) -> dict:
    return policy_for(tmp_path)


@pytest.fixture(params=ENGINES)
def conn(request, people_db, policy):
    import dpsql
    c = dpsql.connect(people_db, policy=policy, analyst="alice")
    yield c
    c.close()


@contextlib.contextmanager
def benchmark_script(name: str):
    """Import benchmarks/<name>.py as a module (registered under its name while in use,
    since dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
