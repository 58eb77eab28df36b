"""SCRAM for a user name the server does not know looks like SCRAM for a real analyst.

The server-first message shows the salt and the iteration count; for an unknown name they must
have the shape of the real verifiers (iteration count, salt length), stay the same across server
restarts (a real user's never change), and differ between names.
"""
from __future__ import annotations

import base64
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap

from dpsql.frontends.pgwire.auth import make_verifier
from dpsql.frontends.pgwire.server import ServerThread
from dpsql.backend import Backend
from tests.conftest import policy_for
from tests.proxy.conftest import raw_connect
from tests.proxy import wire
from tests.proxy.wire import read_messages as _read

PASSWORD = "pw"
ITERATIONS = 8192           # not the default 4096: an unknown user must get this too
SALT = 24                   # bytes, not the default 16


def _policy(tmp_path) -> dict:
    analysts = {name: {"password": make_verifier(PASSWORD, salt=os.urandom(SALT), iterations=ITERATIONS)}
                for name in ("alice", "bob", "carol")}
    analysts["odd"] = {"password": make_verifier(PASSWORD)}          # one of another shape: not the common one
    return policy_for(tmp_path, analysts=analysts)


def server_first(port: int, user: str) -> dict[str, str]:
    """The attributes of the server-first message the server sends `user` (then hang up)."""
    s = raw_connect(port)
    try:
        s.sendall(wire.startup_message({"user": user, "database": "test"}))
        _read(s, "R")
        first = b"n,,n=,r=abcdefghijklmnop"
        s.sendall(wire.frontend("p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
        body = _read(s, "R")[-1][1]
        assert struct.unpack("!i", body[:4])[0] == 11          # AuthenticationSASLContinue
        return dict(part.split("=", 1) for part in body[4:].decode().split(","))
    finally:
        s.close()


def shape(attrs: dict[str, str]) -> tuple[int, int]:
    return int(attrs["i"]), len(base64.b64decode(attrs["s"]))


_OTHER_PROCESS = textwrap.dedent("""
    import json, sys
    from dpsql.frontends.pgwire.server import ServerThread
    from dpsql.backend import Backend
    from tests.proxy.test_scram_mock import server_first
    db, policy, names = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    with Backend(db, policy) as backend, ServerThread(backend) as srv:
        print(json.dumps({n: server_first(srv.port, n)["s"] for n in names}))
""")


def test_unknown_user_looks_like_a_real_one(people_db, tmp_path):
    pol = _policy(tmp_path)
    names = ["mallory", "eve", "alice"]
    with Backend(people_db, pol) as backend:
        with ServerThread(backend) as srv:
            first = {n: server_first(srv.port, n) for n in names}
        with ServerThread(backend) as srv:             # a second server on the same policy
            again = {n: server_first(srv.port, n) for n in names}
    assert shape(first["alice"]) == (ITERATIONS, SALT)
    assert shape(first["mallory"]) == shape(first["eve"]) == shape(first["alice"])
    assert first["mallory"]["s"] != first["eve"]["s"]
    assert {n: a["s"] for n, a in again.items()} == {n: a["s"] for n, a in first.items()}
    # a restart is a new process: the mock salts must not come from a per-process secret
    out = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, people_db, json.dumps(pol, default=str), *names],
                         capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {n: a["s"] for n, a in first.items()}


def test_the_secret_is_a_private_file_beside_the_ledger(people_db, tmp_path):
    pol = _policy(tmp_path)
    with Backend(people_db, pol) as backend, ServerThread(backend) as srv:
        server_first(srv.port, "mallory")
    secret = tmp_path / "ledger.server-secret"
    assert secret.stat().st_size == 32
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ledger.server-secret.")]   # no temp left


def test_mock_parameters():
    from dpsql.frontends.pgwire.auth import MockParams, verifier_shape
    a, b = make_verifier("x", iterations=10000), make_verifier("y", salt=b"s" * 20, iterations=10000)
    assert verifier_shape([]) == (4096, 16)
    assert verifier_shape([a, a, b, "not a verifier"]) == (10000, 16)
    m = MockParams(b"k" * 32, 10000, 40)
    it, salt, _, _ = m.verifier("someone")
    assert it == 10000 and len(salt) == 40 and salt == m.verifier("someone")[1] != m.verifier("someone else")[1]
    assert MockParams(b"j" * 32, 10000, 40).verifier("someone")[1] != salt
