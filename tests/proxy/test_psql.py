"""psql against the proxy (subprocess, PGPASSWORD)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.proxy.conftest import CI, PASSWORD

PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(PSQL is None and not CI, reason="psql is not installed")


def psql(proxy, *commands: str, user: str = "alice", password: str = PASSWORD, extra=()) -> subprocess.CompletedProcess:
    assert PSQL is not None, "psql is required in CI"
    args = [PSQL, "-h", "127.0.0.1", "-p", str(proxy.port), "-U", user, "-d", "test", "-X",
            "-v", "VERBOSITY=verbose", *extra]
    for c in commands:
        args += ["-c", c]
    env = {**os.environ, "PGPASSWORD": password, "PGSSLMODE": "prefer", "PGCONNECT_TIMEOUT": "10"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


def test_private_query_shows_rows_and_the_charge(proxy):
    r = psql(proxy, "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY state")
    assert r.returncode == 0, r.stderr
    assert " state |" in r.stdout and "(8 rows)" in r.stdout and " CA " in r.stdout
    assert "NOTICE:  00000: epsilon charged 0.5" in r.stderr


def test_error_shows_the_sqlstate(proxy):
    r = psql(proxy, "SELECT * FROM people")
    assert r.returncode == 1
    assert "ERROR:  42501: SELECT * is not allowed" in r.stderr
    assert "HINT:" in r.stderr


def test_settings_show_budget_and_explain(proxy):
    r = psql(proxy, "SET dpsql.epsilon = 0.25", "SHOW dpsql.epsilon", "SHOW dpsql.budget",
             "EXPLAIN DP SELECT AVG(age) FROM people")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("SET")
    assert "epsilon \n---------\n    0.25" in out
    assert "epsilon_remaining" in out and "alice" in out
    assert "rewritten_sql" in out and "laplace" in out


def test_several_statements_in_one_string(proxy):
    r = psql(proxy, "SET dpsql.epsilon = 0.5; SHOW dpsql.epsilon; SELECT COUNT(*) FROM people")
    assert r.returncode == 0, r.stderr
    assert "(1 row)" in r.stdout and "count" in r.stdout
    # psql prints only the last result of a multi-statement -c; the stop at the first error:
    r = psql(proxy, "SHOW dpsql.epsilon; SELECT * FROM people; SET dpsql.epsilon = 0.1")
    assert r.returncode == 1 and "42501" in r.stderr
    r = psql(proxy, "SHOW dpsql.epsilon")
    assert "0.5" in r.stdout      # each psql run is a new session: the defaults


def test_wrong_password_and_unknown_user_look_the_same(proxy):
    wrong = psql(proxy, "SELECT 1", password="nope")
    unknown = psql(proxy, "SELECT 1", user="mallory", password="nope")
    assert wrong.returncode == unknown.returncode == 2
    assert 'FATAL:  password authentication failed for user "alice"' in wrong.stderr
    assert 'FATAL:  password authentication failed for user "mallory"' in unknown.stderr
    assert wrong.stderr.replace("alice", "X") == unknown.stderr.replace("mallory", "X")


def test_budget_exhausted_is_53000(proxy):
    r = psql(proxy, "SELECT COUNT(*) FROM people", "SELECT SUM(age) FROM people", user="poor")
    assert "53000" in r.stderr
