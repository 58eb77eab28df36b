"""Results for people and for scripts: aligned tables with ±, CSV, JSON."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from dpsql.session import Result


def format_value(value: Any, half_width: float | None) -> str:
    """A value for people: noisy numbers rounded to what their noise allows, with ±."""
    if value is None:
        return "NULL"
    if half_width is None or not isinstance(value, float):
        if isinstance(value, float):
            return f"{value:.6g}"
        return str(value)
    if half_width <= 0 or not math.isfinite(half_width):
        return f"{value:.6g}"
    digits = max(0, 1 - math.floor(math.log10(half_width)))
    return f"{value:.{digits}f} ±{half_width:.{digits}f}"


def render_table(result: Result) -> str:
    """An aligned text table; noisy values carry their 95% half-width."""
    if not result.columns:
        return result.tag
    cells = [[format_value(v, hw) for v, hw in zip(row, widths or (None,) * len(row))]
             for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    numeric = [t == "number" for t in result.types]
    def line(values):
        return " | ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    out = [line(result.columns), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def render_csv(result: Result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(result.columns)
    w.writerows(result.rows)
    return buf.getvalue().rstrip("\n")


def render_json(result: Result) -> str:
    rows = []
    for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows)):
        item = {}
        for name, v, hw in zip(result.columns, row, widths or (None,) * len(row)):
            item[name] = v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
            if hw is not None:
                item[f"{name}_ci95"] = hw
        rows.append(item)
    doc: dict[str, Any] = {"columns": result.columns, "rows": rows}
    if result.cost is not None:
        doc["epsilon_charged"], doc["delta_charged"] = result.cost.epsilon, result.cost.delta
    if result.spending is not None:
        doc["epsilon_remaining"] = result.spending.epsilon_remaining
        doc["delta_remaining"] = result.spending.delta_remaining
    return json.dumps(doc, indent=2, default=str)


def rich_table(result: Result):
    """A rich Table for terminals: numbers right-aligned, noisy values as `1204 ±27`."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=True, header_style="bold", show_edge=False, pad_edge=False)
    numeric = [t == "number" for t in result.types] or [False] * len(result.columns)
    for i, name in enumerate(result.columns):
        table.add_column(Text(name), justify="right" if numeric[i] else "left", no_wrap=(i == 0))
    for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows)):
        table.add_row(*[Text(format_value(v, hw)) for v, hw in zip(row, widths or (None,) * len(row))])
    return table
