"""benchmarks/floor.py at a tiny scale: every shape runs on DuckDB and its hand-written floor
answers what the plain query answers (the check that makes it a floor)."""
from __future__ import annotations

import importlib.util
import os
import sys

from tests.conftest import BENCHMARKS


def _floor_module():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("floor_bench", BENCHMARKS / "floor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_shape_runs_and_its_floor_answers_the_plain_query(tmp_path):
    floor = _floor_module()
    out = tmp_path / "floor.md"
    assert floor.main(["--sf", "0.01", "--runs", "1", "--out", str(out)]) == 0
    text = out.read_text()
    for shape in floor.SHAPES:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {shape.name} ("))
        assert line.rstrip(" |").endswith("yes"), line          # floor = plain
    assert "dpsql/floor: median" in text
    assert os.path.getsize(out) > 1000
