"""The field benchmark's harness (benchmarks/field/harness.py): parsing worker output, the speed and
accuracy tables, ratios and targets, from small JSON fixtures. No anchors, no database, no network."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(ROOT / "benchmarks" / "field"))

import harness


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- worker output ---------------------------------------------------------------------------------------

def test_parses_ok_and_refused_results():
    out = harness.parse_worker_output(fixture("worker_smartnoise_ok.json"), "smartnoise")
    assert out["version"] == "1.0.10"
    assert set(out["by_key"]) == {"Q1", "Q2", "Q5"}
    assert out["by_key"]["Q1"]["times_ms"] == [100.0, 120.0, 80.0, 110.0, 90.0]
    assert out["by_key"]["Q5"]["status"] == "refused"
    assert "cannot express" in out["by_key"]["Q5"]["error"]
    assert out["by_key"]["Q2"]["releases"]["1.0"][1] == [["CA", 490.0]]


@pytest.mark.parametrize("text, match", [
    ("not json", "not JSON"),
    ('{"system": "qrlew", "results": []}', "names system 'qrlew'"),
    ('{"system": "smartnoise"}', "no results list"),
    ('{"system": "smartnoise", "results": [{"key": "Q1", "status": "ok"}, {"key": "Q1", "status": "ok"}]}', "unique key"),
    ('{"system": "smartnoise", "results": [{"key": "Q1", "status": "maybe"}]}', "status"),
    ('{"system": "smartnoise", "results": [{"key": "Q1", "status": "refused"}]}', "without an error"),
    ('{"system": "smartnoise", "results": [{"key": "Q1", "status": "ok", "releases": {"1.0": [5]}}]}', "lists of rows"),
])
def test_rejects_malformed_output(text, match):
    with pytest.raises(harness.WorkerError, match=match):
        harness.parse_worker_output(text, "smartnoise")


def test_rejects_non_positive_times():
    with pytest.raises(harness.WorkerError, match="positive"):
        harness.parse_worker_output(fixture("worker_bad_times.json"), "qrlew")


# --- speed ---------------------------------------------------------------------------------------------

def test_speed_rows_medians_and_ratios():
    rows = harness.speed_rows(json.loads(fixture("speed_small.json")))
    assert [(r.size, r.query) for r in rows] == [(100000, "Q1"), (1000000, "Q1"), (1000000, "Q5")]
    q1 = rows[1]
    assert q1.ms["dpsql_pg"] == 21 and q1.ms["smartnoise_pg"] == 90 and q1.ms["raw_pg"] == 11
    assert q1.dpsql_vs_smartnoise == pytest.approx(21 / 90)
    assert q1.smartnoise_speedup == pytest.approx(90 / 21)
    assert q1.dpsql_vs_qrlew == pytest.approx(5 / 50)
    q5 = rows[2]
    assert q5.ms["smartnoise_pg"] is None and q5.notes["smartnoise_pg"] == "refused"
    assert q5.notes["qrlew_duckdb"] == "skipped"
    assert q5.dpsql_vs_smartnoise is None and q5.dpsql_vs_qrlew is None


def test_speed_target_and_rendering():
    rows = harness.speed_rows(json.loads(fixture("speed_small.json")))
    target = harness.speed_target(rows, 1000000)
    assert target[0][0] == "Q1" and target[0][1] == pytest.approx(90 / 21) and target[0][2] is True
    assert target[1] == ("Q5", None, False)       # refused: no ratio, not met
    text = harness.render_speed(rows)
    assert "| 1,000,000 | Q5 | 30.0 | 60.0 | refused | — |" in text
    assert "| 1,000,000 | Q1 | 11.0 | 21.0 | 90.0 | 0.23 | 1.0 | 5.0 | 50.0 | 0.10 |" in text


def test_median_and_percentile():
    assert harness.median([3, 1, 2]) == 2
    assert harness.median([]) is None
    assert harness.percentile([0, 1, 1], 95) == pytest.approx(1.0)
    assert harness.percentile([2, 10, 2], 95) == pytest.approx(9.2)
    assert harness.percentile([5], 95) == 5
    with pytest.raises(ValueError):
        harness.percentile([], 50)


# --- accuracy ------------------------------------------------------------------------------------------

@pytest.fixture
def acc():
    return json.loads(fixture("accuracy_small.json"))


def test_error_stats_ungrouped(acc):
    d = harness.error_stats(acc["accuracy"]["Q1"]["dpsql"]["1.0"], acc["exact"]["Q1"])
    assert d.median_rel == pytest.approx(0.001) and d.p95_abs == pytest.approx(1.0)
    assert d.suppressed == 0 and d.cells == 3
    s = harness.error_stats(acc["accuracy"]["Q1"]["smartnoise"]["1.0"], acc["exact"]["Q1"])
    assert s.median_rel == pytest.approx(0.002) and s.p95_abs == pytest.approx(9.2)


def test_error_stats_grouped_counts_suppressed_groups(acc):
    s = harness.error_stats(acc["accuracy"]["Q2"]["smartnoise"]["1.0"], acc["exact"]["Q2"])
    assert s.suppressed == pytest.approx(0.25)      # TX missing from one of two releases
    assert s.cells == 3
    assert s.median_rel == pytest.approx(0.02) and s.p95_abs == pytest.approx(10.0)
    d = harness.error_stats(acc["accuracy"]["Q2"]["dpsql"]["1.0"], acc["exact"]["Q2"])
    assert d.median_rel == pytest.approx(0.01) and d.suppressed == 0


def test_error_stats_ignores_invented_groups_and_handles_none():
    s = harness.error_stats([[["CA", 11.0], ["ZZ", 5.0]], [["CA", None]]], [["CA", 10.0]])
    assert s.cells == 1 and s.suppressed == pytest.approx(0.5) and s.median_rel == pytest.approx(0.1)


def test_accuracy_table_targets_and_curves(acc):
    table = harness.accuracy_table(acc["accuracy"], acc["exact"], "1.0")
    assert set(table) == {"Q1", "Q2"} and set(table["Q1"]) == {"dpsql", "smartnoise"}
    target = harness.accuracy_target(table, strict=["Q2"])
    assert [(q, ok) for q, _, _, ok in target] == [("Q1", True), ("Q2", True)]
    # equal errors meet "at most" but not "lower"
    same = {"Q4": {"dpsql": harness.ErrorStats(0.01, 1, 0, 1), "smartnoise": harness.ErrorStats(0.01, 1, 0, 1)}}
    assert harness.accuracy_target(same, strict=[])[0][3] is True
    assert harness.accuracy_target(same, strict=["Q4"])[0][3] is False
    missing = {"Q4": {"dpsql": harness.ErrorStats(0.01, 1, 0, 1)}}
    assert harness.accuracy_target(missing, strict=[])[0] == ("Q4", 0.01, None, False)
    curves = harness.error_curves(acc["accuracy"], acc["exact"])
    assert [e for e, _ in curves["Q1"]["dpsql"]] == [0.1, 1.0]
    assert curves["Q1"]["dpsql"][0][1] == pytest.approx(0.01)   # errors 10, 10, 30 of 1000


def test_render_accuracy_marks_refused(acc):
    table = harness.accuracy_table(acc["accuracy"], acc["exact"], "1.0")
    text = harness.render_accuracy(table, ["dpsql", "smartnoise", "qrlew"], refused={"qrlew": {"Q1": "err"}})
    q1 = next(line for line in text.splitlines() if line.startswith("| Q1 "))
    assert "refused | refused | refused" in q1
    q2 = next(line for line in text.splitlines() if line.startswith("| Q2 "))
    assert "25%" in q2 and "— | — | —" in q2
