"""Smoke test of benchmarks/simulation.py: a row per result size with numbers, both checkouts
timed, and a compared module whose widths differ is reported (exit 1). No timing assertions."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import benchmark_script

POSTPROCESS = Path(__file__).resolve().parents[1] / "dpsql" / "postprocess" / "simulate.py"


def test_simulation_benchmark_table(capsys):
    with benchmark_script("simulation") as bench:
        assert bench.main(["--repeat", "1", "--compare", str(POSTPROCESS)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == [f"{n:,}" for n in bench.ROWS]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert len(cells) == 4 and all(float(c) > 0 for c in cells[2:])


def test_simulation_benchmark_reports_different_widths(tmp_path, capsys):
    broken = tmp_path / "simulate.py"
    broken.write_text(POSTPROCESS.read_text().replace("k = math.ceil(0.95 * (n - 1))", "k = math.ceil(0.9 * (n - 1))"))
    with benchmark_script("simulation") as bench:
        assert bench.main(["--repeat", "1", "--compare", str(broken)]) == 1
    assert "the widths differ" in capsys.readouterr().err
