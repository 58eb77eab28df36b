"""The PostgreSQL JDBC driver against the proxy: a tiny Java program (tests/proxy/jdbc/),
compiled with javac into a temporary directory. With CI=true a missing javac or driver jar fails."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.proxy.conftest import CI, PASSWORD

JAR = Path("/usr/share/java/postgresql.jar")
SOURCE = Path(__file__).parent / "jdbc" / "DpsqlJdbc.java"


@pytest.fixture(scope="module")
def jdbc_classes(tmp_path_factory) -> str:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None or not JAR.is_file():
        why = f"JDBC test needs javac, java and {JAR} (apt-get install -y default-jdk-headless libpostgresql-jdbc-java)"
        if CI:
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("jdbc")
    subprocess.run([javac, "-d", str(out), str(SOURCE)], check=True, capture_output=True, timeout=120)
    return f"{out}:{JAR}"


def run_java(classpath: str, port: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-cp", classpath, "DpsqlJdbc", f"jdbc:postgresql://127.0.0.1:{port}/test",
                           "alice", PASSWORD, *extra], capture_output=True, text=True, timeout=120)


def test_jdbc_statement_and_prepared_statement(proxy, jdbc_classes):
    r = run_java(jdbc_classes, proxy.port)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("statement count ") for line in lines)
    assert sum(line.startswith("prepared ") for line in lines) == 8
    assert [line for line in lines if line.startswith("round ")] == [f"round {i} rows 8" for i in range(6)]
    assert "error 42501" in lines
    assert any(line.startswith("budget alice ") for line in lines)
    assert lines[-1] == "done"


SHAPES = [   # what BI tools and analysts send: (SQL, rows expected or None for "some", columns)
    ("SELECT * FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS virtual_table LIMIT 1000", 8, "state,n"),
    ('SELECT "source"."state" AS "state", "source"."n" AS "n" FROM (SELECT state, COUNT(*) AS n FROM people '
     'GROUP BY state) AS "source" LIMIT 1048575', 8, "state,n"),
    ("SELECT p.sex, COUNT(*) AS n FROM visits v JOIN people p ON v.person_id = p.person_id GROUP BY p.sex", 2, "sex,n"),
    ("SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region", 3, "region,n"),
    ("WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT COUNT(*) AS n FROM adults", 1, "n"),
    ("SELECT AVG(n) AS a FROM (SELECT person_id, COUNT(*) AS n FROM visits GROUP BY person_id) t", 1, "a"),
    ("SELECT COUNT(*) AS n FROM people WHERE person_id IN (SELECT person_id FROM visits WHERE kind = 'lab')", 1, "n"),
]


def test_jdbc_joins_ctes_subqueries_and_bi_wrappers(proxy, jdbc_classes):
    r = run_java(jdbc_classes, proxy.port, "queries", *[s for s, _, _ in SHAPES],
                 "SELECT COUNT(*) FROM visits v JOIN people p ON v.state = p.state")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:len(SHAPES)] == [f"ok {n} {cols}" for _, n, cols in SHAPES]
    assert lines[len(SHAPES)] == "error 42501"         # a join not on the unit: refused, with its class
    assert lines[-1] == "done"
