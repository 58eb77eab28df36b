"""HAVING, ORDER BY, LIMIT and arithmetic on noisy rows.

Everything here runs after the noise, on released values only, so it is
post-processing and costs no privacy (Dwork & Roth 2014, Prop. 2.1). It never sees
true values: its inputs are the noisy measures and the (public or selected) keys.

Expressions are the tuple trees described in dpsql.analysis.plan. Each is evaluated
with an interval: the value's 95% half-width propagated by interval arithmetic
(a conservative bound for sums and products of independent noises; for a quotient
whose denominator's interval contains 0 the width is unbounded, reported as None).
"""
from __future__ import annotations

import datetime as _dt
import math
from decimal import Decimal
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

Env = Mapping[str, float]


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def evaluate(expr: tuple, env: Env, keys: Sequence[Any]) -> Any:
    """The value of an expression for one group."""
    op = expr[0]
    if op == "lit":
        return expr[1]
    if op == "ref":
        return env[expr[1]]
    if op == "key":
        return keys[expr[1]]
    if op == "avg":
        _, s, c, lo, hi = expr
        return _avg(env[s], env[c], lo, hi)
    if op == "neg":
        v = evaluate(expr[1], env, keys)
        return None if v is None else -v
    if op in ("add", "sub", "mul", "div"):
        a, b = evaluate(expr[1], env, keys), evaluate(expr[2], env, keys)
        if a is None or b is None:
            return None
        a, b = float(a), float(b)
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        return None if b == 0 else a / b
    if op == "cmp":
        a, b = evaluate(expr[2], env, keys), evaluate(expr[3], env, keys)
        if a is None or b is None:
            return None
        try:
            return _CMP[expr[1]](a, b)
        except (TypeError, ArithmeticError):      # mixed types; Decimal NaN
            return None
    if op == "and":
        a, b = evaluate(expr[1], env, keys), evaluate(expr[2], env, keys)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if op == "or":
        a, b = evaluate(expr[1], env, keys), evaluate(expr[2], env, keys)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False
    if op == "not":
        a = evaluate(expr[1], env, keys)
        return None if a is None else not a
    if op == "isnull":
        v = evaluate(expr[1], env, keys) is None
        return not v if expr[2] else v
    raise ValueError(f"unknown expression {op}")


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _avg(s: float, c: float, lo: float, hi: float) -> float:
    """mid + s/max(c, 1), clamped to [lo, hi]: post-processing of two noisy values
    (s: the noisy sum of x - mid; c: the noisy count of non-NULL x)."""
    mid = (lo + hi) / 2
    return min(hi, max(lo, mid + s / max(c, 1.0)))


def half_width(expr: tuple, env: Env, widths: Env, keys: Sequence[Any]) -> float | None:
    """95% half-width of an expression's noise, by interval arithmetic (None: unbounded)."""
    iv = _interval(expr, env, widths, keys)
    if iv is None:
        return None
    v = evaluate(expr, env, keys)
    if v is None or isinstance(v, (str, bool)):
        return None
    lo, hi = iv
    w = max(hi - float(v), float(v) - lo, 0.0)
    return w if math.isfinite(w) else None


def _interval(expr: tuple, env: Env, widths: Env, keys) -> tuple[float, float] | None:
    op = expr[0]
    if op == "lit":
        v = expr[1]
        return (float(v), float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if op == "key":
        return None
    if op == "ref":
        v, w = env[expr[1]], widths[expr[1]]
        return (v - w, v + w)
    if op == "avg":
        _, s, c, lo, hi = expr
        sv, sw, cv, cw = env[s], widths[s], env[c], widths[c]
        clo, chi = max(cv - cw, 1.0), max(cv + cw, 1.0)
        mid = (lo + hi) / 2
        cands = [mid + a / b for a in (sv - sw, sv + sw) for b in (clo, chi)]
        return (min(hi, max(lo, min(cands))), min(hi, max(lo, max(cands))))
    if op == "neg":
        iv = _interval(expr[1], env, widths, keys)
        return None if iv is None else (-iv[1], -iv[0])
    if op in ("add", "sub", "mul", "div"):
        a, b = _interval(expr[1], env, widths, keys), _interval(expr[2], env, widths, keys)
        if a is None or b is None:
            return None
        if op == "add":
            return (a[0] + b[0], a[1] + b[1])
        if op == "sub":
            return (a[0] - b[1], a[1] - b[0])
        if op == "mul":
            p = [x * y for x in a for y in b]
            return (min(p), max(p))
        if b[0] <= 0 <= b[1]:
            return None
        p = [x / y for x in a for y in b]
        return (min(p), max(p))
    return None


@dataclass
class Table:
    columns: list[str]
    rows: list[tuple]
    widths: list[tuple]     # per row, per column: 95% half-width or None


def finish(rows: list[tuple[Sequence[Any], Env, Env]], outputs: Sequence[tuple[str, tuple, bool]],
           having: tuple | None, order: Sequence[tuple[tuple, bool, bool]], limit: int | None,
           offset: int) -> Table:
    """Evaluate SELECT items per group, then HAVING, ORDER BY, OFFSET and LIMIT.

    rows: (keys, noisy values, half-widths) per released group.
    outputs: (name, expression, noisy) per SELECT item.
    """
    kept = []
    for keys, env, widths in rows:
        if having is not None and evaluate(having, env, keys) is not True:
            continue
        values = tuple(evaluate(e, env, keys) for _, e, _ in outputs)
        hw = tuple(half_width(e, env, widths, keys) if noisy else None for _, e, noisy in outputs)
        sort_keys = tuple(evaluate(e, env, keys) for e, _, _ in order)
        kept.append((sort_keys, values, hw))
    for i in reversed(range(len(order))):
        _, desc, nulls_first = order[i]
        kept.sort(key=lambda r: _sort_key(r[0][i], nulls_first, desc), reverse=desc)
    if offset:
        kept = kept[offset:]
    if limit is not None:
        kept = kept[:limit]
    return Table([o[0] for o in outputs], [k[1] for k in kept], [k[2] for k in kept])


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
