"""HAVING, ORDER BY, LIMIT and outer queries on noisy rows: the released table.

Everything here runs after the noise, on released values only, so it is post-processing and
costs no privacy (Dwork & Roth 2014, Prop. 2.1). It never sees true values: its inputs are the
noisy measures and the (public or selected) keys. Expressions are dpsql.postprocess.expr nodes;
the half-widths come from dpsql.postprocess.simulate.
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np

from dpsql.postprocess.expr import Env, Expr, Key, Ref, Win
from dpsql.postprocess.simulate import Check, draws_for, half_width, noise_draws, simulated_half_widths

CHECK_ROWS = 8192                     # rows between two checks


@dataclass
class Table:
    columns: list[str]
    rows: list[tuple]
    widths: list[tuple]     # per row, per column: 95% half-width or None
    cut: int = 0            # released groups cut by max_released_rows before their values were drawn


def finish(rows: list[tuple[Sequence[Any], Env, Env]], outputs: Sequence[tuple[str, Expr, bool]],
           having: Expr | None, order: Sequence[tuple[Expr, bool, bool]], limit: int | None,
           offset: int, noise: Mapping[str, tuple[str, float]] | None = None, check: Check = None) -> Table:
    """Evaluate SELECT items per group, then HAVING, ORDER BY, OFFSET and LIMIT.

    rows: (keys, noisy values, half-widths) per released group.
    outputs: (name, expression, noisy) per SELECT item.
    noise: each measure's (mechanism name, scale); given, derived values' half-widths are
    simulated (simulated_half_width), else propagated by interval arithmetic.
    check: called every CHECK_ROWS rows (the Session's cancel and time limit, Session.check).
    """
    kept = []
    getters = [_getter(e) for _, e, _ in outputs]
    for n, (keys, env, widths) in enumerate(rows):
        if check is not None and n % CHECK_ROWS == 0:
            check()
        if having is not None and having.evaluate(env, keys) is not True:
            continue
        values = tuple([get(env, keys) for get in getters])
        sort_keys = tuple([e.evaluate(env, keys) for e, _, _ in order])
        kept.append((sort_keys, values, (keys, env, widths)))
    kept = _order_and_cut(kept, order, limit, offset)
    # A plain aggregate's half-width is its mechanism's: the draws are needed (and drawn) only for
    # derived values, and only those of measures the outputs read.
    simulate = noise and kept and any(noisy and not isinstance(e, Ref) for _, e, noisy in outputs)
    draws = noise_draws(noise, draws_for(len(kept))) if simulate else None
    columns = []
    for _, e, noisy in outputs:
        if check is not None:
            check()
        if not noisy:
            columns.append([None] * len(kept))
        elif isinstance(e, Ref):
            columns.append([_ref_width(env[e.name], widths[e.name]) for _, _, (_, env, widths) in kept])
        elif draws is None or not e.refs() <= draws.keys():   # a quantile: no draws
            columns.append([half_width(e, env, widths, keys) for _, _, (keys, env, widths) in kept])
        else:
            columns.append(simulated_half_widths(e, [k[2][1] for k in kept], draws, [k[2][0] for k in kept], check))
    hw = list(zip(*columns)) if columns else [() for _ in kept]
    return Table([o[0] for o in outputs], [k[1] for k in kept], hw)


def _getter(expr: Expr) -> Callable[[Env, Sequence[Any]], Any]:
    """expr.evaluate as a function of (env, keys), direct for a key or a measure."""
    if isinstance(expr, Key):
        i = expr.index
        return lambda env, keys: keys[i]
    if isinstance(expr, Ref):
        name = expr.name
        return lambda env, keys: env[name]
    return expr.evaluate


def _ref_width(v: Any, w: float) -> float | None:
    """half_width(Ref(name), ...) for the measure's value v and its half-width w, the same steps."""
    if v is None or isinstance(v, (str, bool)):
        return None
    lo, hi = v - w, v + w
    x = max(hi - float(v), float(v) - lo, 0.0)
    return x if math.isfinite(x) else None


def wrap(table: Table, wraps: Sequence[Any], check: Check = None) -> Table:
    """Apply outer queries (dpsql.analysis.plan.Wrap, innermost first) to released rows: each
    selects columns of the rows below it (Key(i) is the i-th), filters, orders and limits.
    A selected column keeps its half-width; a computed one has none. check: as in finish."""
    for w in wraps:
        if hasattr(w, "sql"):               # window functions: dpsql.analysis.windows.SqlWrap
            table = sql_wrap(table, w, check)
            continue
        kept = []
        for n, (values, hw) in enumerate(zip(table.rows, table.widths)):
            if check is not None and n % CHECK_ROWS == 0:
                check()
            if w.where is not None and w.where.evaluate({}, values) is not True:
                continue
            out = tuple(e.evaluate({}, values) for _, e in w.outputs)
            widths = tuple(hw[e.index] if isinstance(e, Key) else None for _, e in w.outputs)
            kept.append((tuple(e.evaluate({}, values) for e, _, _ in w.order), out, widths))
        kept = _order_and_cut(kept, w.order, w.limit, w.offset)
        table = Table([name for name, _ in w.outputs], [k[1] for k in kept], [k[2] for k in kept])
    return table



def through(values: Sequence[Any], wraps: Sequence[Any], default: Any = None) -> list:
    """Per-column facts (types, accuracy) of the innermost rows, carried to the outermost
    query's columns: a selected column keeps its fact, a computed one gets `default` (a window
    function's SQL type where the facts are SQL types, `default` a type name)."""
    out = list(values)
    for w in wraps:
        out = [out[e.index] if isinstance(e, Key)
               else e.sql_type if isinstance(e, Win) and default == "VARCHAR" else default
               for _, e in w.outputs]
    return out


def _duck_type(values: Sequence[Any]) -> str:
    """The DuckDB type of one released column, from its values (all of one kind, or NULL)."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return "DOUBLE"
    if kinds <= {bool}:
        return "BOOLEAN"
    if kinds <= {int}:
        return "BIGINT"
    if kinds <= {int, float, Decimal} or all(issubclass(k, (int, float, Decimal, np.number)) for k in kinds):
        return "DOUBLE"
    if kinds <= {_dt.date}:
        return "DATE"
    if kinds <= {_dt.datetime}:
        return "TIMESTAMP"
    return "VARCHAR"


def sql_wrap(table: Table, w: Any, check: Check = None) -> Table:
    """An outer query with window functions over the released rows (dpsql.analysis.windows):
    the rows go into a table of an in-memory DuckDB of their own, which can read nothing else (no
    file or network access, its configuration locked, one thread, 256 MB), and the outer query
    runs there. Post-processing: its input is the released values only. A selected column keeps
    its half-width (through the row position `_dprow`), a computed one has none."""
    con = duckdb.connect(":memory:", config={"enable_external_access": False, "threads": 1,
                                             "memory_limit": "256MB", "integer_division": True})
    try:
        con.execute("SET lock_configuration = true")
        cols = list(zip(*table.rows)) if table.rows else [() for _ in w.columns]
        types = [_duck_type(c) for c in cols]
        decl = ", ".join(f'"{n}" {t}' for n, t in zip(w.columns, types))
        con.execute(f"CREATE TABLE _released ({decl}, _dprow BIGINT)")
        if table.rows:
            def cell(v, t):
                if v is None or t in ("BOOLEAN", "BIGINT", "DATE", "TIMESTAMP"):
                    return v
                return float(v) if t == "DOUBLE" else str(v)
            insert = f"INSERT INTO _released VALUES ({', '.join('?' * (len(types) + 1))})"
            for at in range(0, len(table.rows), CHECK_ROWS):
                if check is not None:
                    check()
                con.executemany(insert, [tuple(cell(v, t) for v, t in zip(r, types)) + (i,)
                                         for i, r in enumerate(table.rows[at:at + CHECK_ROWS], at)])
        if check is not None:
            check()
        out = con.execute(w.sql).fetchall()
    finally:
        con.close()
    rows, widths = [], []
    for r in out:
        values = r if w.distinct else r[:-1]
        rows.append(tuple(values))
        src = None if w.distinct else table.widths[r[-1]]
        widths.append(tuple(src[e.index] if src is not None and isinstance(e, Key) else None for _, e in w.outputs))
    return Table([name for name, _ in w.outputs], rows, widths)


def _order_and_cut(kept: list, order: Sequence[tuple[Expr, bool, bool]], limit: int | None, offset: int) -> list:
    for i in reversed(range(len(order))):
        _, desc, nulls_first = order[i]
        kept.sort(key=lambda r: _sort_key(r[0][i], nulls_first, desc), reverse=desc)
    if offset:
        kept = kept[offset:]
    if limit is not None:
        kept = kept[:limit]
    return kept


def _sort_key(v: Any, nulls_first: bool, desc: bool):
    # With reverse=desc, the tuple's first element places NULLs where asked.
    is_null = v is None
    null_rank = (0 if is_null else 1) if nulls_first != desc else (1 if is_null else 0)
    if is_null:
        return (null_rank, 0, "")
    if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
        # NaN after every number (as PostgreSQL orders it); never compared, so never raises
        nan = v.is_nan() if isinstance(v, Decimal) else v != v
        return (null_rank, 0, 1 if nan else 0, 0 if nan else v)
    if isinstance(v, (_dt.date, _dt.datetime, _dt.time)):
        return (null_rank, 1, type(v).__name__, v)
    return (null_rank, 2, "", str(v))
