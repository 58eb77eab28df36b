"""Results for people and for scripts: aligned tables with ±, CSV, JSON."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from dpsql.result import Result


def caret(sql: str, position: int | None, first_line: int = 1) -> str | None:
    """psql's pointer to an error position (1-based, PostgreSQL's Position): the statement's line
    that holds it as `LINE n: ...`, and a `^` under the character; None without a position.
    `first_line` numbers the statement's first line (a script's statement starts further down)."""
    if position is None or not sql or not 1 <= position <= len(sql) + 1:
        return None
    at = position - 1
    start = sql.rfind("\n", 0, at) + 1
    end = sql.find("\n", at)
    line = sql[start:end if end >= 0 else len(sql)].expandtabs(1)
    label = f"LINE {first_line + sql.count(chr(10), 0, start)}: "
    return f"{label}{line}\n{' ' * (len(label) + at - start)}^"


def format_value(value: Any, half_width: float | None) -> str:
    """A value for people: noisy numbers rounded to what their noise allows, with ±. Never "-0": a
    noisy -0.3 shown to whole units is 0 (format's "z" option)."""
    if value is None:
        return "NULL"
    if half_width is None or not isinstance(value, float):
        if isinstance(value, float):
            return f"{value:z.6g}"
        return str(value)
    if half_width <= 0 or not math.isfinite(half_width):
        return f"{value:z.6g}"
    digits = max(0, 1 - math.floor(math.log10(half_width)))
    return f"{value:z.{digits}f} ±{half_width:.{digits}f}"


def _cells(result: Result) -> list[list[str]]:
    return [[format_value(v, hw) for v, hw in zip(row, widths or (None,) * len(row))]
            for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows))]


def render_table(result: Result, border: int = 1) -> str:
    """An aligned text table, as psql prints it with `\\pset border` 0, 1 (the default) or 2;
    noisy values carry their 95% half-width."""
    if not result.columns:
        return result.tag
    cells = _cells(result)
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    numeric = [t == "number" for t in result.types]
    sep, cross = {0: (" ", " "), 1: (" | ", "-+-"), 2: (" | ", "-+-")}[border]

    def line(values):
        text = sep.join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric))
        return f"| {text} |" if border == 2 else text.rstrip()
    rule = cross.join("-" * w for w in widths)
    rule = f"+-{rule}-+" if border == 2 else rule
    out = ([rule] if border == 2 else []) + [line(result.columns), rule] + [line(r) for r in cells]
    out += [rule] if border == 2 else []
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def render_expanded(result: Result) -> str:
    """One block per row, one line per column, as psql's expanded display (\\x) prints it."""
    if not result.columns:
        return result.tag
    cells = _cells(result)
    name_w = max(len(c) for c in result.columns)
    value_w = max([len(v) for r in cells for v in r] + [1])
    out = []
    for i, row in enumerate(cells, 1):
        head = f"-[ RECORD {i} ]"
        out.append(head + "-" * max(0, name_w + value_w + 3 - len(head)))
        out += [f"{name.ljust(name_w)} | {value}".rstrip() for name, value in zip(result.columns, row)]
    if not cells:
        out.append("(0 rows)")
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
        if result.cost.rho is not None:
            doc["rho_charged"] = float(result.cost.rho)
    if result.spending is not None:
        doc["epsilon_remaining"] = result.spending.epsilon_remaining
        doc["delta_remaining"] = result.spending.delta_remaining
        doc["accountant"] = result.spending.accountant
        if result.spending.rho_remaining is not None:
            doc["rho_remaining"] = result.spending.rho_remaining
    return json.dumps(doc, indent=2, default=str)
