"""HAVING, ORDER BY, LIMIT and arithmetic on noisy rows.

Everything here runs after the noise, on released values only, so it is
post-processing and costs no privacy (Dwork & Roth 2014, Prop. 2.1). It never sees
true values: its inputs are the noisy measures and the (public or selected) keys.

Expressions are the tuple trees described in dpsql.analysis.plan. A plain noisy aggregate's
95% half-width is its mechanism's (exact, from the mechanism's parameters). A derived value (AVG,
VARIANCE, arithmetic of aggregates) gets its 95% half-width by simulation (simulated_half_width):
a statement about the mechanisms, computed from released values and public parameters only.
Interval arithmetic on the parts' widths (half_width) remains for what simulation does not
cover (comparisons); for a quotient whose denominator's interval contains 0 the width is
unbounded, reported as None.
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from decimal import Decimal
from typing import Any

import numpy as np

Env = Mapping[str, float]
Check = Callable[[], None] | None     # raises to stop the statement (Session.check); None: never
CHECK_ROWS = 8192                     # rows between two checks


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
    if op == "var":
        _, s, q, c, lo, hi, sample, root = expr
        return _var(env[s], env[q], env[c], lo, hi, sample, root)
    if op == "avgraw":      # an AVG before its clamp (unclamped(): accuracy only)
        _, s, c, lo, hi = expr
        return None if env[c] < 0.5 else (lo + hi) / 2 + env[s] / max(env[c], 1.0)
    if op == "varraw":
        _, s, q, c, lo, hi, sample, root = expr
        return _var_raw(env[s], env[q], env[c], sample, root)
    if op == "clamp":       # ("clamp", a, lo, hi): a sample-and-aggregate mean kept in its range
        v = evaluate(expr[1], env, keys)
        return None if v is None else min(expr[3], max(expr[2], float(v)))
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


def _avg(s: float, c: float, lo: float, hi: float) -> float | None:
    """mid + s/max(c, 1), clamped to [lo, hi]: post-processing of two noisy values
    (s: the noisy sum of x - mid; c: the noisy count of non-NULL x). NULL where the noisy count
    is below 1/2 (it rounds to no row), as SQL's AVG of no rows is: an empty group of a public
    domain gets NULL, not the midpoint of the range with a width that claims certainty."""
    if c < 0.5:
        return None
    mid = (lo + hi) / 2
    return min(hi, max(lo, mid + s / max(c, 1.0)))


def _var(s: float, q: float, c: float, lo: float, hi: float, sample: bool, root: bool) -> float | None:
    """Variance from three noisy sums over values clamped to [lo, hi]: with y = x - mid, the
    plug-in estimate q/n - (s/n)^2 (n = max(c, 1)), clamped to [0, ((hi - lo)/2)^2], the largest
    population variance of values in [lo, hi], then (sample) times n/(n - 1) when n > 1 (a sample
    variance reaches that much more: 0 and 20 have sample variance 200); root: its square root.
    Post-processing of noisy values: it costs no privacy, and its error is the noise's effect,
    reported by half_width."""
    if c < (1.5 if sample else 0.5):    # SQL: NULL over no rows (sample: over fewer than two)
        return None
    n = max(c, 1.0)
    v = min(max(q / n - (s / n) ** 2, 0.0), ((hi - lo) / 2) ** 2)
    if sample and n > 1:    # after the clamp: a sample variance reaches n/(n-1) of the population's bound
        v *= n / (n - 1)
    return math.sqrt(v) if root else v


def _var_raw(s: float, q: float, c: float, sample: bool, root: bool) -> float | None:
    """_var before its clamp; root: the signed square root (monotone, so a variance estimate
    below 0 gives a standard deviation estimate below 0, as far from the truth as it is)."""
    if c < (1.5 if sample else 0.5):
        return None
    n = max(c, 1.0)
    v = q / n - (s / n) ** 2
    if sample and n > 1:
        v *= n / (n - 1)
    return math.copysign(math.sqrt(abs(v)), v) if root else v


def unclamped(expr: tuple) -> tuple:
    """The expression with the clamps of AVG, VARIANCE/STDDEV and sample-and-aggregate means
    taken out, for accuracy only (the released value keeps them).

    A clamp to [lo, hi] that holds the true value moves an estimate only towards the truth:
    |clamp(u) - t| <= |u - t| when t is in [lo, hi]. So a 95% half-width of the unclamped
    estimate u is one of the clamped value too. Simulated around the clamped value itself, a
    value pinned at a bound (a small group's AVG whose noisy sum/count falls far outside the
    range) would come out with half-width 0: certainty, where there is none."""
    op = expr[0]
    if op == "avg":
        return ("avgraw",) + expr[1:]
    if op == "var":
        return ("varraw",) + expr[1:]
    if op == "clamp":
        return unclamped(expr[1])
    if op in ("lit", "ref", "key"):
        return expr
    return (op,) + tuple(unclamped(e) if isinstance(e, tuple) else e for e in expr[1:])


def _range_width(expr: tuple) -> float:
    """The width of the range a top-level clamp keeps the released value in (inf: none): the
    released value and the truth both lie in it, so no half-width need exceed it."""
    op = expr[0]
    if op == "avg":
        return float(expr[4] - expr[3])
    if op == "clamp":
        return float(expr[3] - expr[2])
    if op == "var":         # a sample variance of n >= 2 values: at most n/(n-1) <= 2 times h^2
        h2 = ((expr[5] - expr[4]) / 2) ** 2 * (2 if expr[6] else 1)
        return float(math.sqrt(h2) if expr[7] else h2)
    return math.inf


def half_width(expr: tuple, env: Env, widths: Env, keys: Sequence[Any]) -> float | None:
    """95% half-width of an expression's noise, by interval arithmetic (None: unbounded)."""
    if evaluate(expr, env, keys) is None:
        return None
    cap, expr = _range_width(expr), unclamped(expr)      # as in _simulate
    fallback = cap if math.isfinite(cap) else None
    iv = _interval(expr, env, widths, keys)
    if iv is None:
        return fallback
    v = evaluate(expr, env, keys)
    if v is None or isinstance(v, (str, bool)):
        return fallback
    lo, hi = iv
    w = min(max(hi - float(v), float(v) - lo, 0.0), cap)
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
    if op == "avgraw":
        _, s, c, lo, hi = expr
        sv, sw, cv, cw = env[s], widths[s], env[c], widths[c]
        clo, chi = max(cv - cw, 1.0), max(cv + cw, 1.0)
        cands = [(lo + hi) / 2 + a / b for a in (sv - sw, sv + sw) for b in (clo, chi)]
        return (min(cands), max(cands))
    if op == "varraw":
        _, s, q, c, lo, hi, sample, root = expr
        corners = [_var_raw(sv, qv, cv, sample, root)
                   for sv in (env[s] - widths[s], env[s] + widths[s]) + ((0.0,) if abs(env[s]) <= widths[s] else ())
                   for qv in (env[q] - widths[q], env[q] + widths[q])
                   for cv in (env[c] - widths[c], env[c] + widths[c])]
        if any(c is None for c in corners):
            return None
        return (min(corners), max(corners))
    if op == "var":
        _, s, q, c, lo, hi, sample, root = expr
        corners = []
        for sv in (env[s] - widths[s], env[s] + widths[s]) + ((0.0,) if abs(env[s]) <= widths[s] else ()):
            for qv in (env[q] - widths[q], env[q] + widths[q]):
                for cv in (env[c] - widths[c], env[c] + widths[c]):
                    corners.append(_var(sv, qv, cv, lo, hi, sample, root))
        if any(c is None for c in corners):         # the count's range reaches "no row"
            return None
        return (min(corners), max(corners))
    if op == "clamp":
        iv = _interval(expr[1], env, widths, keys)
        return None if iv is None else (min(expr[3], max(expr[2], iv[0])), min(expr[3], max(expr[2], iv[1])))
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


# -- derived values' accuracy by simulation ------------------------------------------------------

SIM_DRAWS = 4000          # noise draws per simulation: the 95% quantile's own error is about 1%
SIM_WORK = 2_000_000      # at most this many draws over all rows of one result (then fewer per row)
SIM_MIN_DRAWS = 400


def draws_for(rows: int) -> int:
    """Draws per row for a result of `rows` released rows: SIM_DRAWS up to 500 rows, then fewer
    (at least SIM_MIN_DRAWS, whose 95% quantile is within about 5%), so that a large result's
    widths cost seconds, not minutes. A function of the number of released rows only."""
    return max(SIM_MIN_DRAWS, min(SIM_DRAWS, SIM_WORK // max(rows, 1)))
SIM_SEED = 0x5EED_D95     # fixed and public: the simulation is reproducible and uses no secret


def noise_draws(noise: Mapping[str, tuple[str, float]], draws: int = SIM_DRAWS) -> dict[str, np.ndarray]:
    """For each noisy measure (name -> (mechanism name, scale)), `draws` noises from its
    distribution: Laplace of scale b, or Gaussian of standard deviation sigma (the continuous
    distributions the grid mechanisms approximate to within their grid of about 2^-20 of the
    scale). Drawn with a fixed, public seed (numpy's PCG64), never with the secure RNG that
    noised the answer: these draws are not noise on anything, only a description of it.

    A function of its arguments only, so the same measures' draws are computed once and kept
    (a repeated query shape asks for the same ones); the arrays are read-only."""
    return dict(_noise_draws(tuple(sorted((name, kind, float(scale)) for name, (kind, scale) in noise.items())),
                             draws))


@lru_cache(maxsize=128)
def _noise_draws(noise: tuple[tuple[str, str, float], ...], draws: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SIM_SEED)
    out = {}
    for name, kind, scale in noise:
        z = rng.laplace(0.0, scale, draws) if kind == "laplace" else rng.normal(0.0, scale, draws)
        z.flags.writeable = False
        out[name] = z
    return out


def simulated_half_width(expr: tuple, env: Env, draws: Mapping[str, np.ndarray],
                         keys: Sequence[Any]) -> float | None:
    """The 95% half-width of a derived noisy value, by a parametric bootstrap over the noise.

    Post-processing, and a statement about the mechanisms rather than the data: its inputs are the
    released noisy values (env), the mechanisms' public parameters (draws) and public or released
    keys. Its method: each released value stands for the unknown true one, the mechanisms' noise
    is drawn again SIM_DRAWS times (noise_draws; fewer for results of over 500 rows: draws_for)
    and added to it, the expression is evaluated on each draw, and the half-width is the 95%
    quantile of the distance from the released value. For a plain aggregate this is its mechanism's half-width; for AVG = noisy sum / noisy count
    and other functions of several noises it covers their joint effect (interval arithmetic on
    the parts' 95% widths covers only about 0.95^k of it). It is a plug-in estimate: the spread
    is evaluated at the released values, not the true ones (for a ratio whose denominator is
    small and noisy it is approximate). None: the expression is not numeric, more than 5% of
    the draws leave it undefined, or a quotient's denominator changes sign (or is 0) in more than
    2.5% of them: its 95% range holds 0 and the quotient can be anything (as with interval
    arithmetic, whose width is None there too)."""
    return simulated_half_widths(expr, [env], draws, [keys])[0]


# Rows simulated together: arrays of rows x draws floats of at most _SIM_BYTES. Small enough to
# come from the allocator's heap and stay in cache (a batch of 64 rows x 4,000 draws is 2 MB per
# array, each of which glibc maps and faults in afresh: the simulation ran 2.5-3x slower), large
# enough that the per-batch Python work is small.
_SIM_BYTES = 256 * 1024


def simulated_half_widths(expr: tuple, envs: Sequence[Env], draws: Mapping[str, np.ndarray],
                          keys: Sequence[Sequence[Any]], check: Check = None) -> list[float | None]:
    """simulated_half_width for many rows at once (the same draws for each row); check() is
    called between batches."""
    n = len(next(iter(draws.values()))) if draws else 1
    batch = max(1, _SIM_BYTES // (8 * n))
    out: list[float | None] = []
    for at in range(0, len(envs), batch):
        if check is not None:
            check()
        out += _simulate(expr, envs[at:at + batch], draws, keys[at:at + batch])
    return out


def _simulate(expr: tuple, envs: Sequence[Env], draws: Mapping[str, np.ndarray],
              keys: Sequence[Sequence[Any]]) -> list[float | None]:
    values = [evaluate(expr, env, k) for env, k in zip(envs, keys)]
    numeric = [v is not None and isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values]
    if not any(numeric):
        return [None] * len(envs)
    # the spread of the unclamped estimate around itself (unclamped: a valid width for the
    # clamped value), never wider than the clamp's own range
    cap = _range_width(expr)
    expr = unclamped(expr)
    values = [evaluate(expr, env, k) if ok else None for env, k, ok in zip(envs, keys, numeric)]
    vec = {name: np.array([float(env[name]) for env in envs])[:, None] + z[None, :]
           for name, z in draws.items() if name in envs[0]}
    try:
        sim = _vector(expr, vec, keys)
    except _NotVector:
        return [None] * len(envs)
    n = len(next(iter(draws.values())))
    center = np.array([float(v) if ok and v is not None else np.nan for v, ok in zip(values, numeric)])[:, None]
    # One fresh rows x draws array, then in place (the partition is most of the cost). A draw
    # where the expression is undefined (NaN) counts as infinitely far: numpy orders NaN after
    # every number, +inf included, so the quantile is not finite (None) exactly when more than
    # 5% of the draws are undefined or infinite, as if each NaN were +inf.
    with np.errstate(invalid="ignore"):
        dist = np.subtract(np.broadcast_to(np.asarray(sim, dtype=float), (len(envs), n)), center)
        np.abs(dist, out=dist)
    k = math.ceil(0.95 * (n - 1))                  # numpy's "higher" 95% quantile
    dist.partition(k, axis=1)
    w = dist[:, k]
    # undefined or unbounded draws: the clamp's range still holds the value and the truth
    fallback = cap if math.isfinite(cap) else None
    return [(min(float(x), cap) if math.isfinite(x) else fallback) if ok else None for x, ok in zip(w, numeric)]


class _NotVector(Exception):
    pass


def _column(values: Sequence[Any]) -> np.ndarray:
    """Per-row constants (a key, per row) as a column; NaN for NULL."""
    out = []
    for v in values:
        if v is None:
            out.append(np.nan)
        elif isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            raise _NotVector
        else:
            out.append(float(v))
    return np.array(out)[:, None]


def _vector(expr: tuple, vec: Mapping[str, np.ndarray], keys: Sequence[Sequence[Any]]):
    """evaluate() over arrays of draws, one row per group (NaN where evaluate gives None)."""
    op = expr[0]
    if op == "lit":
        return _column([expr[1]])
    if op == "key":
        return _column([k[expr[1]] for k in keys])
    if op == "ref":
        return vec[expr[1]]
    if op == "avg":
        _, s, c, lo, hi = expr
        mid = (lo + hi) / 2
        out = np.maximum(vec[c], 1.0)               # then in place: mid + s / max(c, 1), clipped
        np.divide(vec[s], out, out=out)
        np.add(mid, out, out=out)
        np.clip(out, lo, hi, out=out)
        out[vec[c] < 0.5] = np.nan                  # undefined: no row (_avg)
        return out
    if op == "var":
        _, s, q, c, lo, hi, sample, root = expr
        n = np.maximum(vec[c], 1.0)
        v = np.clip(vec[q] / n - (vec[s] / n) ** 2, 0.0, ((hi - lo) / 2) ** 2)
        if sample:
            v = np.where(n > 1, v * n / np.where(n > 1, n - 1, 1.0), v)
        v = np.where(vec[c] < (1.5 if sample else 0.5), np.nan, v)
        return np.sqrt(v) if root else v
    if op == "avgraw":
        _, s, c, lo, hi = expr
        out = np.maximum(vec[c], 1.0)
        np.divide(vec[s], out, out=out)
        np.add((lo + hi) / 2, out, out=out)
        out[vec[c] < 0.5] = np.nan
        return out
    if op == "varraw":
        _, s, q, c, lo, hi, sample, root = expr
        n = np.maximum(vec[c], 1.0)
        v = vec[q] / n - (vec[s] / n) ** 2
        if sample:
            v = np.where(n > 1, v * n / np.where(n > 1, n - 1, 1.0), v)
        v = np.where(vec[c] < (1.5 if sample else 0.5), np.nan, v)
        return np.copysign(np.sqrt(np.abs(v)), v) if root else v
    if op == "clamp":       # a sample-and-aggregate mean, kept in its output range
        return np.clip(_vector(expr[1], vec, keys), expr[2], expr[3])
    if op == "neg":
        return -_vector(expr[1], vec, keys)
    if op in ("add", "sub", "mul", "div"):
        a, b = _vector(expr[1], vec, keys), _vector(expr[2], vec, keys)
        with np.errstate(all="ignore"):
            if op == "add":
                return a + b
            if op == "sub":
                return a - b
            if op == "mul":
                return a * b
            a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
            q = np.where(b == 0, np.nan, a / np.where(b == 0, 1.0, b))
            if b.shape[-1] > 1:
                # the denominator's 95% range holds 0: no finite width is honest for that row
                flips = np.mean(np.sign(b) != np.sign(np.median(b, axis=-1, keepdims=True)), axis=-1) > 0.025
                q = np.where(flips[:, None], np.nan, q)
            return q
    raise _NotVector


@dataclass
class Table:
    columns: list[str]
    rows: list[tuple]
    widths: list[tuple]     # per row, per column: 95% half-width or None
    cut: int = 0            # released groups cut by max_released_rows before their values were drawn


def finish(rows: list[tuple[Sequence[Any], Env, Env]], outputs: Sequence[tuple[str, tuple, bool]],
           having: tuple | None, order: Sequence[tuple[tuple, bool, bool]], limit: int | None,
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
        if having is not None and evaluate(having, env, keys) is not True:
            continue
        values = tuple([get(env, keys) for get in getters])
        sort_keys = tuple([evaluate(e, env, keys) for e, _, _ in order])
        kept.append((sort_keys, values, (keys, env, widths)))
    kept = _order_and_cut(kept, order, limit, offset)
    # A plain aggregate's half-width is its mechanism's: the draws are needed (and drawn) only for
    # derived values, and only those of measures the outputs read.
    simulate = noise and kept and any(noisy and e[0] != "ref" for _, e, noisy in outputs)
    draws = noise_draws(noise, draws_for(len(kept))) if simulate else None
    columns = []
    for _, e, noisy in outputs:
        if check is not None:
            check()
        if not noisy:
            columns.append([None] * len(kept))
        elif e[0] == "ref":
            columns.append([_ref_width(env[e[1]], widths[e[1]]) for _, _, (_, env, widths) in kept])
        elif draws is None or not _direct_refs(e) <= draws.keys():   # a quantile: no draws
            columns.append([half_width(e, env, widths, keys) for _, _, (keys, env, widths) in kept])
        else:
            columns.append(simulated_half_widths(e, [k[2][1] for k in kept], draws, [k[2][0] for k in kept], check))
    hw = list(zip(*columns)) if columns else [() for _ in kept]
    return Table([o[0] for o in outputs], [k[1] for k in kept], hw)


def _getter(expr: tuple) -> Callable[[Env, Sequence[Any]], Any]:
    """evaluate(expr, env, keys) as a function of (env, keys), direct for a key or a measure."""
    op = expr[0]
    if op == "key":
        i = expr[1]
        return lambda env, keys: keys[i]
    if op == "ref":
        name = expr[1]
        return lambda env, keys: env[name]
    return lambda env, keys: evaluate(expr, env, keys)


def _ref_width(v: Any, w: float) -> float | None:
    """half_width(("ref", name), ...) for the measure's value v and its half-width w, the same steps."""
    if v is None or isinstance(v, (str, bool)):
        return None
    lo, hi = v - w, v + w
    x = max(hi - float(v), float(v) - lo, 0.0)
    return x if math.isfinite(x) else None


def _direct_refs(expr: tuple) -> set:
    """The ("ref", name) measures an expression reads (a quantile's has no simulated draws: its
    error is a rank bound, dpsql.noise.exponential, so such an expression keeps interval arithmetic)."""
    if expr[0] == "ref":
        return {expr[1]}
    return set().union(*(_direct_refs(a) for a in expr[1:] if isinstance(a, tuple)))


def wrap(table: Table, wraps: Sequence[Any], check: Check = None) -> Table:
    """Apply outer queries (dpsql.analysis.plan.Wrap, innermost first) to released rows: each
    selects columns of the rows below it (("key", i) is the i-th), filters, orders and limits.
    A selected column keeps its half-width; a computed one has none. check: as in finish."""
    for w in wraps:
        if hasattr(w, "sql"):               # window functions: dpsql.analysis.windows.SqlWrap
            table = sql_wrap(table, w, check)
            continue
        kept = []
        for n, (values, hw) in enumerate(zip(table.rows, table.widths)):
            if check is not None and n % CHECK_ROWS == 0:
                check()
            if w.where is not None and evaluate(w.where, {}, values) is not True:
                continue
            out = tuple(evaluate(e, {}, values) for _, e in w.outputs)
            widths = tuple(hw[e[1]] if e[0] == "key" else None for _, e in w.outputs)
            kept.append((tuple(evaluate(e, {}, values) for e, _, _ in w.order), out, widths))
        kept = _order_and_cut(kept, w.order, w.limit, w.offset)
        table = Table([name for name, _ in w.outputs], [k[1] for k in kept], [k[2] for k in kept])
    return table


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
    counts = list(counts) + [False] * (n - len(counts))
    noisy = list(noisy) + [False] * (n - len(noisy))
    rounded = [round_counts and c for c in counts]
    bounds = list(bounds) + [None] * (n - len(bounds))

    def shown(v: Any, whole: bool) -> Any:
        if isinstance(v, float):
            if whole and math.isfinite(v):
                return max(0, round(v))
            return v + 0.0
        return v

    out_rows, out_widths = [], []
    for r, row in enumerate(rows):
        if check is not None and r % CHECK_ROWS == 0:
            check()
        hw_row = widths[r] if r < len(widths) else (None,) * n
        vals, hws = [], []
        for i, v in enumerate(row):
            vals.append(shown(v, rounded[i]))
            hws.append(hw_row[i])
            if intervals and noisy[i]:
                hw = hw_row[i]
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and hw is not None
                lo, hi = (float(v) - hw, float(v) + hw) if ok else (None, None)
                if ok and bounds[i] is not None:
                    lo, hi = max(lo, bounds[i][0]), min(hi, bounds[i][1])
                vals += [shown(lo, rounded[i]), shown(hi, rounded[i])] if ok else [None, None]
                hws += [None, None]
        out_rows.append(tuple(vals))
        out_widths.append(tuple(hws))
    cols, tys, dbs, acc = [], [], [], []
    for i, name in enumerate(columns):
        db = db_types[i] if i < len(db_types) else "VARCHAR"
        db = "BIGINT" if rounded[i] else db
        cols.append(name)
        tys.append(types[i] if i < len(types) else "string")
        dbs.append(db)
        acc.append(accuracy[i] if i < len(accuracy) else None)
        if intervals and noisy[i]:
            cols += [f"{name}_low", f"{name}_high"]
            tys += ["number", "number"]
            dbs += [db, db]
            acc += [None, None]
    return cols, tys, dbs, out_rows, acc if accuracy else list(accuracy), out_widths


def through(values: Sequence[Any], wraps: Sequence[Any], default: Any = None) -> list:
    """Per-column facts (types, accuracy) of the innermost rows, carried to the outermost
    query's columns: a selected column keeps its fact, a computed one gets `default` (a window
    function's SQL type where the facts are SQL types, `default` a type name)."""
    out = list(values)
    for w in wraps:
        out = [out[e[1]] if e[0] == "key" else e[1] if e[0] == "win" and default == "VARCHAR" else default
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
    import duckdb       # a base dependency; imported here, where only window queries pay for it
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
        widths.append(tuple(src[e[1]] if src is not None and e[0] == "key" else None for _, e in w.outputs))
    return Table([name for name, _ in w.outputs], rows, widths)


def _order_and_cut(kept: list, order: Sequence[tuple[tuple, bool, bool]], limit: int | None, offset: int) -> list:
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
