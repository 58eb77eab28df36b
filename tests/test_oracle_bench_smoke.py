"""Smoke test of benchmarks/oracle.py at a tiny size: every generated query is run and counted,
and the report has its table, the refusal reasons and one row per mismatch class."""
from __future__ import annotations

import pytest

from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def bench():
    with benchmark_script("oracle") as module:
        yield module


def _table(md: str) -> dict[str, str]:
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_tiny_run_counts_every_query_and_renders(bench, tmp_path):
    tally = bench.run_oracle(12, 3, ["duckdb"], tmp_path, pairs=2, log=lambda msg: None)
    assert tally.generated == 12
    assert tally.accepted + sum(tally.refused.values()) + len({m.sql for m in tally.mismatches["error"]}) >= 12
    assert tally.checked["value"] == tally.accepted and tally.checked["metamorphic"] == 2
    md = bench.render(tally, queries=12, seed=3, seconds=1.0)
    table = _table(md)
    assert table["queries generated"] == "12" and table["engines"] == "duckdb"
    assert int(table["distinct shapes"]) == len(tally.shapes) > 0
    for o in ("error", "value", "sensitivity", "agree", "metamorphic"):
        assert table[f"mismatches: {o}"].split()[0] == str(len(tally.mismatches[o]))
    classes = {bench.mismatch_class(m) for m in tally.all()}
    assert md.count("\n| ") - len(table) - 1 == max(1, len(classes))     # one row per class (+ its header)


def test_main_writes_the_report(bench, tmp_path):
    out = tmp_path / "oracle.md"
    bench.main(["--queries", "5", "--seed", "4", "--engines", "duckdb", "--pairs", "1", "--out", str(out)])
    md = out.read_text()
    assert md.startswith("# dpsql differential-correctness oracle") and "| queries generated | 5 |" in md
