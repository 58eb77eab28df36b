"""A released result as the analyst's settings show it (SET dpsql.round, SET dpsql.intervals)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpsql.postprocess.simulate import Check
from dpsql.postprocess.table import CHECK_ROWS


def present(columns: list[str], types: list[str], db_types: list[str], rows: list[tuple], accuracy: list,
            widths: list[tuple], counts: Sequence[bool], noisy: Sequence[bool], *, intervals: bool,
            round_counts: bool, bounds: Sequence[tuple[float, float] | None] = (), check: Check = None
            ) -> tuple[list, list, list, list, list, list]:
    """A released result as the analyst's settings show it. Post-processing only: every value out
    is a function of released values (noisy values, their half-widths, which are themselves
    functions of released values and public parameters) and the plan's public facts (which
    columns are noisy, which are counts).

    - Floats are canonical: -0.0 becomes 0.0 (a noisy value, a product or a rounding can give
      -0.0, which says nothing and prints as a surprise).
    - round_counts (SET dpsql.round = on): each noisy COUNT column's value is the nearest whole
      number, and negative ones are clamped to 0. A true count is never negative, so the clamp
      only moves a value towards what is possible; both are post-processing and cost nothing, but
      a clamped count is biased upwards near 0 (off by default for that reason).
    - intervals (SET dpsql.intervals = on): after each noisy column c, c_low and c_high, the 95%
      interval value -/+ half-width (Snowflake's DP_INTERVAL_LOW/HIGH); NULL where the width is
      unbounded. With round_counts a count's interval is rounded and clamped at 0 as its value;
      an AVG's interval is cut to the column's declared bounds (public), within which its value
      always lies.

    counts, noisy: per column (as the outermost query's columns). check: as in finish. Returns
    (columns, types, db_types, rows, accuracy, widths)."""
    n = len(columns)
    noisy = list(noisy) + [False] * (n - len(noisy))
    rounded = [round_counts and c for c in counts] + [False] * (n - len(counts))
    bounds = list(bounds) + [None] * (n - len(bounds))
    spread = [intervals and x for x in noisy]      # the columns that get _low and _high
    out_rows, out_widths = [], []
    for r, row in enumerate(rows):
        if check is not None and r % CHECK_ROWS == 0:
            check()
        vals, hws = _row(row, widths[r] if r < len(widths) else (None,) * n, rounded, spread, bounds)
        out_rows.append(vals)
        out_widths.append(hws)
    cols, tys, dbs, acc = [], [], [], []
    for i, name in enumerate(columns):
        db = db_types[i] if i < len(db_types) else "VARCHAR"
        db = "BIGINT" if rounded[i] else db
        cols.append(name)
        tys.append(types[i] if i < len(types) else "string")
        dbs.append(db)
        acc.append(accuracy[i] if i < len(accuracy) else None)
        if spread[i]:
            cols += [f"{name}_low", f"{name}_high"]
            tys += ["number", "number"]
            dbs += [db, db]
            acc += [None, None]
    return cols, tys, dbs, out_rows, acc if accuracy else list(accuracy), out_widths


def _shown(v: Any, whole: bool) -> Any:
    """A value as shown: -0.0 as 0.0; whole (a rounded count): the nearest whole number, at least 0."""
    if isinstance(v, float):
        if whole and math.isfinite(v):
            return max(0, round(v))
        return v + 0.0
    return v


def _row(row: tuple, hw_row: tuple, rounded: Sequence[bool], spread: Sequence[bool],
         bounds: Sequence[tuple[float, float] | None]) -> tuple[tuple, tuple]:
    """One released row's shown values and half-widths, with each spread column's interval after it."""
    vals: list[Any] = []
    hws: list[Any] = []
    for i, v in enumerate(row):
        vals.append(_shown(v, rounded[i]))
        hws.append(hw_row[i])
        if spread[i]:
            hw = hw_row[i]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and hw is not None
            lo, hi = (float(v) - hw, float(v) + hw) if ok else (None, None)
            if ok and bounds[i] is not None:
                lo, hi = max(lo, bounds[i][0]), min(hi, bounds[i][1])
            vals += [_shown(lo, rounded[i]), _shown(hi, rounded[i])] if ok else [None, None]
            hws += [None, None]
    return tuple(vals), tuple(hws)
