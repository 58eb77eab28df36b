"""node-postgres (the `pg` package) against the proxy: .ci/run installs it into tests/proxy/node."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.proxy.conftest import CI, PASSWORD

NODE_DIR = Path(__file__).parent / "node"
NODE = shutil.which("node")
READY = NODE is not None and (NODE_DIR / "node_modules" / "pg").is_dir()


@pytest.mark.skipif(not READY and not CI, reason="node or node-postgres is not installed "
                                                 "(npm install --prefix tests/proxy/node)")
def test_node_postgres(proxy):
    assert READY, "CI must have node and tests/proxy/node/node_modules (see .ci/run)"
    out = subprocess.run([NODE, str(NODE_DIR / "client.js"), str(proxy.port), "alice", PASSWORD],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    steps = {s["step"]: s for s in map(json.loads, out.stdout.splitlines())}
    plain = steps["plain"]
    assert plain["fields"][0][0] == "state" and plain["fields"][1] == ["n", 701]     # float8: noisy
    assert plain["rows"] >= 1 and isinstance(plain["first"]["n"], (int, float))
    assert isinstance(steps["param"]["n"], (int, float))
    assert steps["refused"]["code"] == "42501" and "SELECT *" in steps["refused"]["message"]
    assert steps["budget"]["row"]["analyst"] == "alice" and steps["budget"]["notices"] >= 2
