"""Fixtures for the subset tests: the test policy, its schema, the checker and the grammar.

The model they hand out (the policy, the schema, the checker, the side conditions of
grammars/dpsql.lark and the corpus reader) is tests/analysis/checker.py; see its docstring.
"""
from __future__ import annotations

import pytest
from lark import Lark

from dpsql.policy import Policy, load_policy
from tests.analysis.checker import (
    NAMES,
    POLICY,
    REGIONS,
    NoEngine,
    check,
    policy_dict,
    read_corpus,
    repair_conditions,
    side_conditions,
    sql_parser,
)


@pytest.fixture(scope="session")
def parser() -> Lark:
    return sql_parser()


@pytest.fixture(scope="session")
def terminals() -> dict[str, tuple[str, ...]]:
    return NAMES


@pytest.fixture(scope="session")
def checker():
    return check


@pytest.fixture(scope="session")
def conditions():
    return side_conditions


@pytest.fixture(scope="session")
def repair():
    return repair_conditions


@pytest.fixture(scope="session")
def make_policy():
    """The single-table test policy (people and staff), as a dict: make_policy(ledger)."""
    return lambda ledger="unused-ledger.sqlite": policy_dict(ledger, relational=False)


@pytest.fixture(scope="session")
def make_corpus_policy():
    """The whole test policy (the corpus's tables), as a dict: make_corpus_policy(ledger)."""
    return policy_dict


@pytest.fixture(scope="session")
def policy() -> Policy:
    return POLICY


@pytest.fixture(scope="session")
def regions() -> tuple[tuple[str, str], ...]:
    """The rows of the public table `regions`."""
    return REGIONS


@pytest.fixture
def engineless_session(tmp_path):
    """A Session over the test policy whose engine refuses to run: for dpsql commands (SET ...)."""
    from dpsql.ledger import Ledger
    from dpsql.session import Session
    policy = load_policy(policy_dict(tmp_path / "ledger.sqlite"))
    session = Session(NoEngine(), policy, "a", ledger=Ledger(tmp_path / "ledger.sqlite"))
    yield session
    session.close()


def pytest_generate_tests(metafunc):
    """One test per corpus file (id = file name) for tests using `accept_case`, `reject_case`
    or `reject_file`. `reject_case` marks files with an `-- xfail:` header (known checker
    gaps) xfail(strict=True); `reject_file` does not (for tests of the files themselves)."""
    for fixture, kind, with_marks in (("accept_case", "accept", True), ("reject_case", "reject", True),
                                      ("reject_file", "reject", False)):
        if fixture in metafunc.fixturenames:
            params = []
            for fname, headers, sql in read_corpus(kind):
                marks = ([pytest.mark.xfail(strict=True, reason=headers["xfail"])]
                         if with_marks and "xfail" in headers else [])
                params.append(pytest.param((fname, headers, sql), id=fname, marks=marks))
            metafunc.parametrize(fixture, params)
