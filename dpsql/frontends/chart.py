"""A horizontal bar chart of a private result in the terminal, with 95% whiskers.

    CA  ████████████├──┤  4918 ±18

One bar per row: the label is the row's exact (key) columns, the bar the first noisy
numeric column, the whiskers its 95% interval (value ± half-width).
"""
from __future__ import annotations

import math

from dpsql.frontends.render import format_value
from dpsql.result import Result

_BAR, _LEFT, _RIGHT, _LINE, _TICK = "█", "├", "┤", "─", "┼"


def _value_column(result: Result) -> int | None:
    """Index of the first noisy numeric column, or None."""
    accuracy = result.accuracy or [None] * len(result.columns)
    for i, (acc, typ) in enumerate(zip(accuracy, result.types)):
        if acc is not None and typ == "number":
            return i
    return None


def _number(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def bar_chart(result: Result, width: int = 60) -> str:
    """The chart as text, at most `width` characters wide; a one-line message when
    there is nothing to chart."""
    col = _value_column(result)
    if result.kind != "private" or col is None:
        return "nothing to chart: the result has no noisy numeric column"
    if not result.rows:
        return "nothing to chart: the result has no rows"
    accuracy = result.accuracy or [None] * len(result.columns)
    keys = [i for i, acc in enumerate(accuracy) if acc is None]
    widths = result.half_widths or [(None,) * len(result.columns)] * len(result.rows)

    items = []   # (label, value, half_width, text)
    for row, hws in zip(result.rows, widths):
        label = " ".join(format_value(row[i], None) for i in keys) if keys else result.columns[col]
        value = _number(row[col])
        hw = _number(hws[col]) if hws and hws[col] is not None else None
        text = format_value(row[col], hw)
        items.append((label, value, hw or 0.0, text))

    label_w = max(len(label) for label, *_ in items)
    text_w = max(len(text) for *_, text in items)
    plot_w = width - label_w - text_w - 4          # "label  plot  text"
    if plot_w < 10:
        label_w = max(1, min(label_w, width // 4))
        plot_w = max(10, width - label_w - text_w - 4)

    present = [(v, hw) for _, v, hw, _ in items if v is not None]
    lo = min([0.0] + [v - hw for v, hw in present])
    hi = max([0.0] + [v + hw for v, hw in present])
    span = (hi - lo) or 1.0

    def pos(x: float) -> int:
        return min(plot_w - 1, max(0, int(round((x - lo) / span * (plot_w - 1)))))

    lines = []
    zero = pos(0.0)
    for label, value, hw, text in items:
        cells = [" "] * plot_w
        if value is not None:
            left, right = pos(value - hw), pos(value + hw)
            p = pos(value)
            a, b = (zero, left) if p >= zero else (right + 1, zero + 1)
            for i in range(max(0, a), min(plot_w, b)):
                cells[i] = _BAR
            if right > left:
                cells[left], cells[right] = _LEFT, _RIGHT
                for i in range(left + 1, right):
                    cells[i] = _LINE
            else:
                cells[left] = _TICK
        plot = "".join(cells).rstrip()
        lines.append(f"{label[:label_w].ljust(label_w)}  {plot.ljust(plot_w)}  {text.rjust(text_w)}".rstrip())
    return "\n".join(lines)
