"""`dpsql serve` does not start a server nobody can log in to."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psycopg
from click.testing import CliRunner

from dpsql.demo import policy_toml
from dpsql.frontends.cli import cli
from tests.conftest import policy_for


def test_serve_refuses_a_policy_without_passwords_and_says_how(people_db, tmp_path):
    pol = tmp_path / "policy.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)))          # no [server], no [analysts.*] password
    r = CliRunner().invoke(cli, ["serve", "--backend", people_db, "--policy", str(pol), "--listen", "127.0.0.1:0"])
    assert r.exit_code == 1
    assert "nobody can log in" in r.output and "dpsql passwd" in r.output and 'auth = "trust"' in r.output
    pol.write_text(policy_toml(policy_for(tmp_path)) + '\n[server]\nauth = "scram-sha-256"\n')
    r = CliRunner().invoke(cli, ["serve", "--backend", people_db, "--policy", str(pol), "--listen", "127.0.0.1:0"])
    assert r.exit_code == 1 and "nobody can log in" in r.output


def _serve(args: list[str], env: dict) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", *args, "--listen",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
    line, deadline = "", time.monotonic() + 60
    while "dpsql serving" not in line and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stderr.readline()
    assert "dpsql serving" in line, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_trust_on_loopback_as_the_error_says_and_the_demo_still_serve(people_db, tmp_path):
    pol = tmp_path / "policy.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)) + '\n[server]\nauth = "trust"\n')
    proc, port = _serve(["--backend", people_db, "--policy", str(pol)], {})
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=zoe dbname=people", autocommit=True) as c:
            assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
    finally:
        _stop(proc)
    proc, port = _serve([], {"DPSQL_HOME": str(tmp_path / "home")})      # the demo: trust, no policy needed
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} user=analyst dbname=demo", autocommit=True) as c:
            assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
    finally:
        _stop(proc)
