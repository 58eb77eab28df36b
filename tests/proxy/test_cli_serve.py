"""`dpsql passwd` and `dpsql serve` as commands (a subprocess; SIGTERM shuts it down cleanly)."""
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
from dpsql.frontends.pgwire.auth import ScramServer
from tests.conftest import policy_for
from tests.proxy.wire import ScramClient


def test_passwd_from_stdin():
    r = CliRunner().invoke(cli, ["passwd", "alice", "--password-stdin"], input="hunter2\n")
    assert r.exit_code == 0, r.output
    verifier = r.stdout.strip().splitlines()[0]
    assert verifier.startswith("SCRAM-SHA-256$4096:")
    c, s = ScramClient("hunter2"), ScramServer(verifier, "alice")
    assert c.verify(s.final(c.final(s.first(c.first()))))


def test_passwd_prompts_twice():
    r = CliRunner().invoke(cli, ["passwd", "bob"], input="pw1\npw1\n")
    assert r.exit_code == 0 and "SCRAM-SHA-256$" in r.stdout and "pw1" not in r.output
    r = CliRunner().invoke(cli, ["passwd", "bob"], input="pw1\npw2\n")
    assert "SCRAM-SHA-256$" not in r.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command(people_db, tmp_path):
    verifier = CliRunner().invoke(cli, ["passwd", "alice", "--password-stdin"], input="pw\n").stdout.split()[0]
    pol = tmp_path / "policy.toml"
    pol.write_text(policy_toml(policy_for(tmp_path)) + f'\n[analysts.alice]\npassword = "{verifier}"\n')
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", people_db,
                             "--policy", str(pol), "--listen", f"127.0.0.1:{port}", "--max-message-bytes", "65536"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "dpsql serving" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
        assert f"dpsql serving {people_db} on 127.0.0.1:{port} (auth scram-sha-256); connect with: " \
               f"psql -h 127.0.0.1 -p {port} -U alice" in line
        with psycopg.connect(f"host=127.0.0.1 port={port} user=alice password=pw dbname=people", autocommit=True) as c:
            assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        rest = proc.stderr.read()
        assert "shutting down" in rest and "Traceback" not in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_needs_a_policy_with_a_backend(people_db):
    r = CliRunner().invoke(cli, ["serve", "--backend", people_db])
    assert r.exit_code != 0 and "--policy" in r.output
