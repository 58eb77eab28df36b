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
