"""The accuracy of released values: 95% half-widths of noisy expressions.

Post-processing, and a statement about the mechanisms rather than the data (Dwork & Roth 2014,
Prop. 2.1). A plain noisy aggregate's 95% half-width is its mechanism's (exact, from the
mechanism's parameters). A derived value (AVG, VARIANCE, arithmetic of aggregates) gets its 95%
half-width by simulation (simulated_half_width): a statement about the mechanisms, computed from
released values and public parameters only. Interval arithmetic on the parts' widths
(half_width) remains for what simulation does not cover (comparisons); for a quotient whose
denominator's interval contains 0 the width is unbounded, reported as None.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

import numpy as np

from dpsql.postprocess.expr import Env, Expr, NotVector

Check = Callable[[], None] | None     # raises to stop the statement (Session.check); None: never


def half_width(expr: Expr, env: Env, widths: Env, keys: Sequence[Any]) -> float | None:
    """95% half-width of an expression's noise, by interval arithmetic (None: unbounded)."""
    if expr.evaluate(env, keys) is None:
        return None
    cap, expr = expr.range_width(), expr.unclamped()      # as in _simulate
    fallback = cap if math.isfinite(cap) else None
    iv = expr.interval(env, widths, keys)
    if iv is None:
        return fallback
    v = expr.evaluate(env, keys)
    if v is None or isinstance(v, (str, bool)):
        return fallback
    lo, hi = iv
    w = min(max(hi - float(v), float(v) - lo, 0.0), cap)
    return w if math.isfinite(w) else None


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


def simulated_half_width(expr: Expr, env: Env, draws: Mapping[str, np.ndarray],
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


def simulated_half_widths(expr: Expr, envs: Sequence[Env], draws: Mapping[str, np.ndarray],
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


def _simulate(expr: Expr, envs: Sequence[Env], draws: Mapping[str, np.ndarray],
              keys: Sequence[Sequence[Any]]) -> list[float | None]:
    values = [expr.evaluate(env, k) for env, k in zip(envs, keys)]
    numeric = [v is not None and isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values]
    if not any(numeric):
        return [None] * len(envs)
    # the spread of the unclamped estimate around itself (unclamped: a valid width for the
    # clamped value), never wider than the clamp's own range
    cap = expr.range_width()
    expr = expr.unclamped()
    values = [expr.evaluate(env, k) if ok else None for env, k, ok in zip(envs, keys, numeric)]
    vec = {name: np.array([float(env[name]) for env in envs])[:, None] + z[None, :]
           for name, z in draws.items() if name in envs[0]}
    try:
        sim = expr.vector(vec, keys)
    except NotVector:
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
