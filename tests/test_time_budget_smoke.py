"""Smoke test of benchmarks/time_budget.py at a tiny scale (TPC-H SF 0.002, 2,000 people, 1 run):
the report has every stage column, and a row per query of both benchmarks in each mode (new text,
repeated); the stage functions it wraps are restored after it; the plans file has both plans of
each answered private query."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import time_budget  # noqa: E402
import tpch  # noqa: E402

import dpsql.planner  # noqa: E402
import dpsql.session  # noqa: E402


def _tables(report: str) -> dict[str, list[str]]:
    """'## <suite>, <mode>' -> that section's table lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in report.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = []
        elif current and line.startswith("|"):
            out[current].append(line)
    return out


def test_time_budget_tiny(tmp_path):
    out, plans = tmp_path / "budget.md", tmp_path / "plans.md"
    before = (dpsql.session.classify, dpsql.planner.planned, dpsql.session.to_sql)
    assert time_budget.main(["--sf", "0.002", "--field-people", "2000", "--runs", "1",
                             "--out", str(out), "--plans-out", str(plans)]) == 0
    assert (dpsql.session.classify, dpsql.planner.planned, dpsql.session.to_sql) == before
    report = out.read_text()
    tables = _tables(report)
    field = time_budget._field_module()
    expected = {"TPC-H DuckDB": [q for q, _ in tpch.workload()], "field DuckDB": list(field.QUERIES)}
    for suite, labels in expected.items():
        for mode in time_budget.MODES:
            lines = tables[f"{suite}, {mode}"]
            head = [c.strip() for c in lines[0].strip("|").split("|")]
            assert head == ["query", "rows", *time_budget.STAGES, "dpsql", "plain", "ratio"]
            for stage in ("parse", "analysis", "rewrite", "charge", "engine", "release", "encode"):
                assert stage in head
            rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
            assert [r[0].split()[0] for r in rows] == labels
            answered = [r for r in rows if re.fullmatch(r"\d+", r[1])]
            assert len(answered) >= len(labels) // 2
            for r in answered:
                assert len(r) == len(head) and float(r[head.index("dpsql")]) > 0 and float(r[head.index("plain")]) > 0
            if suite == "field DuckDB":      # the field's queries are all answered, privately
                assert len(answered) == len(labels) and all("(public)" not in r[0] for r in rows)
                if mode == "new text":       # a new text is parsed and planned
                    assert all(float(r[head.index("analysis")]) > 0 for r in answered)
    text = plans.read_text()
    for q in field.QUERIES:
        line = next(x for x in text.splitlines() if x.startswith(f"| field DuckDB {q} |"))
        assert line.count("planning") == 2
