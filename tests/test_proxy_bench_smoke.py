"""Smoke test of benchmarks/proxy.py, concurrency part only, for a fraction of a second per
configuration: every configuration (direct, engine, one proxy process, `dpsql serve --workers 2`,
in-process) answers with no errors, and the report has a row per client count with numbers
where numbers belong. No timing assertions (speed goals live in the benchmark's own report)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table(markdown: str, header_start: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows' cells of the first table whose header starts so."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    split = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]       # noqa: E731
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(split(line))
    return split(lines[start]), rows


def test_proxy_benchmark_runs_every_configuration(tmp_path):
    out = tmp_path / "proxy.md"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "proxy.py"), "--skip-latency", "--seconds", "0.3",
                          "--people", "300", "--out", str(out)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    report = out.read_text()
    head, rows = _table(report, "| clients |")
    assert [r[0] for r in rows] == ["1", "16", "64"]
    col = {name: head.index(name) for name in ("errors", "proxy q/s", "dpsql q/s", "proxy q/s, 2 processes")}
    for r in rows:
        assert r[col["errors"]] == "0", r
        assert float(r[col["proxy q/s"]]) > 0 and float(r[col["dpsql q/s"]]) > 0
        i = col["proxy q/s, 2 processes"]
        multi = r[i:i + 7]          # q/s, p50, p99, proxy CPU, PG CPU (or n/a), client CPU, ceiling
        assert float(multi[0]) > 0 and float(multi[1]) > 0 and float(multi[3]) > 0 and float(multi[6]) > 0, multi
    assert "`dpsql serve --workers 2`" in report
