"""Terminal bar charts of private results."""
from __future__ import annotations

from dpsql.frontends.chart import bar_chart
from dpsql.result import Accuracy, Result

ACC = Accuracy("laplace", 2.0, 6.0)


def _result(rows, widths, kind="private"):
    return Result(["state", "count"], ["string", "number"], rows, kind, [None, ACC],
                  [(None, w) for w in widths], tag=f"SELECT {len(rows)}")


def test_one_bar_per_row_with_whiskers_and_value():
    res = _result([("CA", 4918.2), ("FL", 2781.0), ("WA", 1200.4)], [180.0, 180.0, 180.0])
    out = bar_chart(res, width=60)
    lines = out.splitlines()
    assert len(lines) == 3 and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("CA ") and lines[0].endswith("4918 ±180")
    for line in lines:
        assert "█" in line and "├" in line and "┤" in line
    bars = [line.count("█") for line in lines]
    assert bars[0] > bars[1] > bars[2]


def test_scales_to_width():
    res = _result([("CA", 100.0), ("FL", 50.0)], [5.0, 5.0])
    narrow, wide = bar_chart(res, width=40), bar_chart(res, width=120)
    assert max(map(len, narrow.splitlines())) <= 40 < max(map(len, wide.splitlines())) <= 120


def test_tiny_interval_is_a_tick_and_negative_values_draw():
    res = _result([("CA", 5000.0), ("FL", -3.0)], [1.0, 1.0])
    out = bar_chart(res, width=60)
    assert "┼" in out and len(out.splitlines()) == 2


def test_no_key_column_uses_the_value_name():
    res = Result(["n"], ["number"], [(20001.3,)], "private", [ACC], [(6.0,)])
    assert bar_chart(res).startswith("n ")


def test_refuses_politely():
    assert "no rows" in bar_chart(_result([], []))
    show = Result(["epsilon"], ["number"], [(0.5,)], "show", [None], [(None,)])
    msg = bar_chart(show)
    assert "\n" not in msg and "noisy" in msg
    public = Result(["state", "n"], ["string", "number"], [("CA", 3)], "public", [None, None], [(None, None)])
    assert "noisy" in bar_chart(public)
