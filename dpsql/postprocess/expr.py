"""Post-processing expressions: typed nodes over released values, each its own interpreter.

SELECT arithmetic, HAVING, ORDER BY and the outer queries' items and filters are small trees of
these frozen nodes (built by dpsql.analysis from the analyst's SQL), so that post-processing
needs no sqlglot. Everything here runs after the noise, on released values only, so it is
post-processing and costs no privacy (Dwork & Roth 2014, Prop. 2.1): its inputs are the noisy
measures (env: name -> released value) and the public or selected keys (keys: by position).

Each node answers four questions, one method each:

- ``evaluate(env, keys)``: its value for one group (None is SQL's NULL);
- ``interval(env, widths, keys)``: the range its value spans when each noisy measure moves by
  its 95% half-width (interval arithmetic; None: unbounded or not numeric);
- ``vector(vec, keys)``: evaluate over arrays of simulated draws, one row per group (NaN where
  evaluate gives None), for dpsql.postprocess.simulate; raises NotVector where it has no such form;
- ``refs()``: the noisy measures it reads.

``unclamped()`` and ``range_width()`` serve the accuracy (see Avg).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from decimal import Decimal
from typing import Any

import numpy as np

Env = Mapping[str, float]
Keys = Sequence[Any]
Vec = Mapping[str, np.ndarray]
Interval = tuple[float, float] | None


class NotVector(Exception):
    """The expression has no vectorised form (a non-numeric key or literal)."""


class Expr:
    """A post-processing expression node. Subclasses are frozen dataclasses; a field that is
    itself an Expr is a child (children(), the generic unclamped())."""
    __slots__ = ()

    def evaluate(self, env: Env, keys: Keys) -> Any:
        raise NotImplementedError

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        return None

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        raise NotVector

    def children(self) -> Iterator[Expr]:
        for f in fields(self):          # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, Expr):
                yield v

    def refs(self) -> frozenset[str]:
        """The noisy measures (by their column names in the rewrite) this expression reads."""
        return frozenset().union(*(c.refs() for c in self.children()))

    def noisy(self) -> bool:
        """Whether the value depends on a noisy measure (else: keys and literals only)."""
        return bool(self.refs())

    def unclamped(self) -> Expr:
        """The expression with the clamps of AVG, VARIANCE/STDDEV and sample-and-aggregate means
        taken out, for accuracy only (the released value keeps them).

        A clamp to [lo, hi] that holds the true value moves an estimate only towards the truth:
        |clamp(u) - t| <= |u - t| when t is in [lo, hi]. So a 95% half-width of the unclamped
        estimate u is one of the clamped value too. Simulated around the clamped value itself, a
        value pinned at a bound (a small group's AVG whose noisy sum/count falls far outside the
        range) would come out with half-width 0: certainty, where there is none."""
        changes = {f.name: getattr(self, f.name).unclamped() for f in fields(self)   # type: ignore[arg-type]
                   if isinstance(getattr(self, f.name), Expr)}
        return replace(self, **changes) if changes else self      # type: ignore[type-var]

    def range_width(self) -> float:
        """The width of the range a top-level clamp keeps the released value in (inf: none): the
        released value and the truth both lie in it, so no half-width need exceed it."""
        return math.inf


def column(values: Sequence[Any]) -> np.ndarray:
    """Per-row constants (a key, per row) as a column; NaN for NULL."""
    out = []
    for v in values:
        if v is None:
            out.append(np.nan)
        elif isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            raise NotVector
        else:
            out.append(float(v))
    return np.array(out)[:, None]


# -- leaves ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Lit(Expr):
    """A literal."""
    value: Any

    def evaluate(self, env: Env, keys: Keys) -> Any:
        return self.value

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        v = self.value
        return (float(v), float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        return column([self.value])

    def refs(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """A noisy measure, by its column name in the rewrite."""
    name: str

    def evaluate(self, env: Env, keys: Keys) -> Any:
        return env[self.name]

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        v, w = env[self.name], widths[self.name]
        return (v - w, v + w)

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        return vec[self.name]

    def refs(self) -> frozenset[str]:
        return frozenset((self.name,))


@dataclass(frozen=True, slots=True)
class Key(Expr):
    """The i-th GROUP BY key (exact: keys are public or selected); in an outer query, the inner
    query's output at position i."""
    index: int

    def evaluate(self, env: Env, keys: Keys) -> Any:
        return keys[self.index]

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        return column([k[self.index] for k in keys])

    def refs(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Win(Expr):
    """A window function's output of an outer query run in SQL (dpsql.analysis.windows.SqlWrap):
    computed by DuckDB over the released rows, so no expression here; sql_type is its SQL type."""
    sql_type: str

    def evaluate(self, env: Env, keys: Keys) -> Any:
        raise ValueError("a window function's value is computed in SQL (dpsql.postprocess.windows)")

    def refs(self) -> frozenset[str]:
        return frozenset()


# -- estimators of noisy sums ---------------------------------------------------------------------

def avg_value(s: float, c: float, lo: float, hi: float) -> float | None:
    """mid + s/max(c, 1), clamped to [lo, hi]: post-processing of two noisy values
    (s: the noisy sum of x - mid; c: the noisy count of non-NULL x). NULL where the noisy count
    is below 1/2 (it rounds to no row), as SQL's AVG of no rows is: an empty group of a public
    domain gets NULL, not the midpoint of the range with a width that claims certainty."""
    if c < 0.5:
        return None
    mid = (lo + hi) / 2
    return min(hi, max(lo, mid + s / max(c, 1.0)))


def var_value(s: float, q: float, c: float, lo: float, hi: float, sample: bool, root: bool) -> float | None:
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


def var_raw(s: float, q: float, c: float, sample: bool, root: bool) -> float | None:
    """var_value before its clamp; root: the signed square root (monotone, so a variance estimate
    below 0 gives a standard deviation estimate below 0, as far from the truth as it is)."""
    if c < (1.5 if sample else 0.5):
        return None
    n = max(c, 1.0)
    v = q / n - (s / n) ** 2
    if sample and n > 1:
        v *= n / (n - 1)
    return math.copysign(math.sqrt(abs(v)), v) if root else v


@dataclass(frozen=True, slots=True)
class Avg(Expr):
    """AVG: clamp(mid + s/max(c, 1), lo, hi), mid = (lo + hi)/2, s the centered sum in value
    units (the Session divides by Measure.divisor), c the count (avg_value). clamped=False: the
    estimate before its clamp (unclamped(): accuracy only)."""
    s: str
    c: str
    lo: float
    hi: float
    clamped: bool = True

    def evaluate(self, env: Env, keys: Keys) -> Any:
        s, c = env[self.s], env[self.c]
        if self.clamped:
            return avg_value(s, c, self.lo, self.hi)
        return None if c < 0.5 else (self.lo + self.hi) / 2 + s / max(c, 1.0)

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        lo, hi = self.lo, self.hi
        sv, sw, cv, cw = env[self.s], widths[self.s], env[self.c], widths[self.c]
        clo, chi = max(cv - cw, 1.0), max(cv + cw, 1.0)
        mid = (lo + hi) / 2
        cands = [mid + a / b for a in (sv - sw, sv + sw) for b in (clo, chi)]
        if not self.clamped:
            return (min(cands), max(cands))
        return (min(hi, max(lo, min(cands))), min(hi, max(lo, max(cands))))

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        c = vec[self.c]
        out = np.maximum(c, 1.0)            # then in place: mid + s / max(c, 1), clipped
        np.divide(vec[self.s], out, out=out)
        np.add((self.lo + self.hi) / 2, out, out=out)
        if self.clamped:
            np.clip(out, self.lo, self.hi, out=out)
        out[c < 0.5] = np.nan               # undefined: no row (avg_value)
        return out

    def refs(self) -> frozenset[str]:
        return frozenset((self.s, self.c))

    def unclamped(self) -> Expr:
        return replace(self, clamped=False)

    def range_width(self) -> float:
        return float(self.hi - self.lo) if self.clamped else math.inf


@dataclass(frozen=True, slots=True)
class Var(Expr):
    """VARIANCE/STDDEV: q/c - (s/c)^2 clamped to [0, ((hi-lo)/2)^2] (s the centered sum, q the sum
    of squares of x - mid); sample: times c/(c-1); root: its square root (var_value).
    clamped=False: before the clamp (var_raw; unclamped(): accuracy only)."""
    s: str
    q: str
    c: str
    lo: float
    hi: float
    sample: bool
    root: bool
    clamped: bool = True

    def _at(self, s: float, q: float, c: float) -> float | None:
        if self.clamped:
            return var_value(s, q, c, self.lo, self.hi, self.sample, self.root)
        return var_raw(s, q, c, self.sample, self.root)

    def evaluate(self, env: Env, keys: Keys) -> Any:
        return self._at(env[self.s], env[self.q], env[self.c])

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        s, q, c = self.s, self.q, self.c
        corners = [self._at(sv, qv, cv)
                   for sv in (env[s] - widths[s], env[s] + widths[s]) + ((0.0,) if abs(env[s]) <= widths[s] else ())
                   for qv in (env[q] - widths[q], env[q] + widths[q])
                   for cv in (env[c] - widths[c], env[c] + widths[c])]
        if any(x is None for x in corners):         # the count's range reaches "no row"
            return None
        return (min(corners), max(corners))         # type: ignore[type-var]

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        n = np.maximum(vec[self.c], 1.0)
        v = vec[self.q] / n - (vec[self.s] / n) ** 2
        if self.clamped:
            v = np.clip(v, 0.0, ((self.hi - self.lo) / 2) ** 2)
        if self.sample:
            v = np.where(n > 1, v * n / np.where(n > 1, n - 1, 1.0), v)
        v = np.where(vec[self.c] < (1.5 if self.sample else 0.5), np.nan, v)
        if not self.root:
            return v
        return np.sqrt(v) if self.clamped else np.copysign(np.sqrt(np.abs(v)), v)

    def refs(self) -> frozenset[str]:
        return frozenset((self.s, self.q, self.c))

    def unclamped(self) -> Expr:
        return replace(self, clamped=False)

    def range_width(self) -> float:
        if not self.clamped:
            return math.inf
        # a sample variance of n >= 2 values: at most n/(n-1) <= 2 times h^2
        h2 = ((self.hi - self.lo) / 2) ** 2 * (2 if self.sample else 1)
        return float(math.sqrt(h2) if self.root else h2)


@dataclass(frozen=True, slots=True)
class Clamp(Expr):
    """A sample-and-aggregate mean kept in its output range [lo, hi]."""
    arg: Expr
    lo: float
    hi: float

    def evaluate(self, env: Env, keys: Keys) -> Any:
        v = self.arg.evaluate(env, keys)
        return None if v is None else min(self.hi, max(self.lo, float(v)))

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        iv = self.arg.interval(env, widths, keys)
        return None if iv is None else (min(self.hi, max(self.lo, iv[0])), min(self.hi, max(self.lo, iv[1])))

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        return np.clip(self.arg.vector(vec, keys), self.lo, self.hi)

    def unclamped(self) -> Expr:
        return self.arg.unclamped()

    def range_width(self) -> float:
        return float(self.hi - self.lo)


# -- arithmetic -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Neg(Expr):
    arg: Expr

    def evaluate(self, env: Env, keys: Keys) -> Any:
        v = self.arg.evaluate(env, keys)
        return None if v is None else -v

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        iv = self.arg.interval(env, widths, keys)
        return None if iv is None else (-iv[1], -iv[0])

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        return -self.arg.vector(vec, keys)


@dataclass(frozen=True, slots=True)
class BinOp(Expr):
    """Arithmetic of two numbers (Add, Sub, Mul, Div): NULL if either is."""
    a: Expr
    b: Expr

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a, b = self.a.evaluate(env, keys), self.b.evaluate(env, keys)
        if a is None or b is None:
            return None
        return self._apply(float(a), float(b))

    def interval(self, env: Env, widths: Env, keys: Keys) -> Interval:
        a, b = self.a.interval(env, widths, keys), self.b.interval(env, widths, keys)
        return None if a is None or b is None else self._span(a, b)

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        a, b = self.a.vector(vec, keys), self.b.vector(vec, keys)
        with np.errstate(all="ignore"):
            return self._apply(a, b)

    def _apply(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def _span(self, a: tuple[float, float], b: tuple[float, float]) -> Interval:
        raise NotImplementedError


class Add(BinOp):
    __slots__ = ()

    def _apply(self, a: Any, b: Any) -> Any:
        return a + b

    def _span(self, a: tuple[float, float], b: tuple[float, float]) -> Interval:
        return (a[0] + b[0], a[1] + b[1])


class Sub(BinOp):
    __slots__ = ()

    def _apply(self, a: Any, b: Any) -> Any:
        return a - b

    def _span(self, a: tuple[float, float], b: tuple[float, float]) -> Interval:
        return (a[0] - b[1], a[1] - b[0])


class Mul(BinOp):
    __slots__ = ()

    def _apply(self, a: Any, b: Any) -> Any:
        return a * b

    def _span(self, a: tuple[float, float], b: tuple[float, float]) -> Interval:
        p = [x * y for x in a for y in b]
        return (min(p), max(p))


class Div(BinOp):
    """a / b; NULL where b is 0 (a noisy denominator can be: no error, no infinity)."""
    __slots__ = ()

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a, b = self.a.evaluate(env, keys), self.b.evaluate(env, keys)
        if a is None or b is None:
            return None
        a, b = float(a), float(b)
        return None if b == 0 else a / b

    def _span(self, a: tuple[float, float], b: tuple[float, float]) -> Interval:
        if b[0] <= 0 <= b[1]:
            return None
        p = [x / y for x in a for y in b]
        return (min(p), max(p))

    def vector(self, vec: Vec, keys: Sequence[Keys]) -> Any:
        a, b = self.a.vector(vec, keys), self.b.vector(vec, keys)
        with np.errstate(all="ignore"):
            a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
            q = np.where(b == 0, np.nan, a / np.where(b == 0, 1.0, b))
            if b.shape[-1] > 1:
                # the denominator's 95% range holds 0: no finite width is honest for that row
                flips = np.mean(np.sign(b) != np.sign(np.median(b, axis=-1, keepdims=True)), axis=-1) > 0.025
                q = np.where(flips[:, None], np.nan, q)
            return q


# -- conditions (HAVING, outer WHERE; ORDER BY may sort by them) ----------------------------------

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


@dataclass(frozen=True, slots=True)
class Cmp(Expr):
    """a op b, op in = <> < <= > >=; NULL if either side is, or they do not compare."""
    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.op not in _CMP:
            raise ValueError(f"unknown comparison {self.op!r}")

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a, b = self.a.evaluate(env, keys), self.b.evaluate(env, keys)
        if a is None or b is None:
            return None
        try:
            return _CMP[self.op](a, b)
        except (TypeError, ArithmeticError):      # mixed types; Decimal NaN
            return None


@dataclass(frozen=True, slots=True)
class And(Expr):
    """SQL's three-valued AND."""
    a: Expr
    b: Expr

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a, b = self.a.evaluate(env, keys), self.b.evaluate(env, keys)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True


@dataclass(frozen=True, slots=True)
class Or(Expr):
    """SQL's three-valued OR."""
    a: Expr
    b: Expr

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a, b = self.a.evaluate(env, keys), self.b.evaluate(env, keys)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False


@dataclass(frozen=True, slots=True)
class Not(Expr):
    arg: Expr

    def evaluate(self, env: Env, keys: Keys) -> Any:
        a = self.arg.evaluate(env, keys)
        return None if a is None else not a


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    """a IS NULL (negated: IS NOT NULL); never NULL itself."""
    arg: Expr
    negated: bool = False

    def evaluate(self, env: Env, keys: Keys) -> Any:
        v = self.arg.evaluate(env, keys) is None
        return not v if self.negated else v


__all__ = ["Add", "And", "Avg", "BinOp", "Clamp", "Cmp", "Div", "Env", "Expr", "IsNull", "Key", "Lit", "Mul",
           "Neg", "Not", "NotVector", "Or", "Ref", "Sub", "Var", "Win", "avg_value", "column", "var_raw",
           "var_value"]
