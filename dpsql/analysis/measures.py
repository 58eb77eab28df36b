"""Typed measures: one frozen class per aggregate part, and the noise mechanisms as an Enum.

A measure is a per-group aggregate computed exactly in the engine, then noised. Each class knows
its own divisor (the released value is the engine's integer divided by it), its per-group bound
Linf (the argument per class is in dpsql.analysis.sensitivity's docstring), its NoiseSpec, and its
SQL parts for the rewrite (the aggregate over a unit's rows and the clamped total over units):

* Count: per unit and group, COUNT(*) or COUNT(column) clamped to max_rows_per_unit (or its own
  `cap`: COUNT(DISTINCT unit) counts each unit once per group).
* Sum: each row clamped to [lo, hi] and held as an exact integer: the value itself for integer
  columns with whole bounds (scale 1), else round(x * scale) with scale = 10^s and the bounds
  rounded outward to that grid; per unit and group the sum is clamped to
  [min(0, m*lo), max(0, m*hi)].
* CenteredSum (AVG's numerator, and VARIANCE's): 2*sum - (lo + hi)*count, so it stays integral.
* SquaredSum (VARIANCE, STDDEV): the sum of (2x - (lo + hi))^2, in the wide integer type.
* SampleAggregate: sample-and-aggregate (CORR, COVAR_*, REGR_*), the centered sum of k block
  values, built by its own rewrite (dpsql.rewrite.sample_aggregate).

Quantiles (dpsql.analysis.quantiles.Quantile) and COUNT(DISTINCT col) of another column
(dpsql.analysis.distinct.DistinctCount) have their own classes; all of them are a `Part`: a name,
a label, and `noise_spec(...)`, so the analysis splits the budget over them alike.

input: the row expression aggregated (a qualified column, or a derived expression whose columns
are clamped to their bounds: dpsql.analysis.expressions). filter: the aggregate's own FILTER
(WHERE ...) condition, checked like WHERE.

The SQL parts for the rewrite: COUNT(*) and COUNT(col) count rows; SUM sums
clamped exact integers; AVG was split by the analysis into a centered SUM and a COUNT
(avg = mid + sum/count, clamped). A centered sum is 2*SUM(v) - (lo+hi)*COUNT(v), in a wide integer
type so that no row count can overflow it; where the engine's SUM of BIGINT is cheap and widens
by itself (EngineDialect.narrow_sums: PostgreSQL), it is SUM(2v - (lo+hi)) of BIGINT terms, and
each unit's clamped contribution goes to the sum across units as a BIGINT, whenever the bounds
prove that every term fits.

The rows subquery (dpsql.rewrite.rows) holds each measure's input as `_x<i>`: the column for
counts and integer sums, the clamped, scaled, rounded BIGINT for other sums (computed once per
row); here it only gets its integer clamp, unless the analysis proved the cast lands in the
bounds by itself (Measure.cast_in_bounds: DOUBLE and PostgreSQL NUMERIC inputs with
|bound| * scale <= 2^50; the argument is dpsql.analysis.bind.cast_in_bounds).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any, ClassVar, Protocol

from sqlglot import exp

from dpsql.analysis import sensitivity as sens
from dpsql.analysis.sql import clamp
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import InternalError


class Mechanism(StrEnum):
    """A noise mechanism. A str: it compares, prints and serialises as its name ("laplace")."""
    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"                   # analytic (Balle & Wang)
    GAUSSIAN_CLASSIC = "gaussian_classic"
    EXPONENTIAL = "exponential"             # a quantile (dpsql.noise.exponential)
    NOISY_MAX = "noisy_max"                 # top-k selection (dpsql.noise.topk)

    @property
    def additive(self) -> bool:
        """Released by adding Laplace or Gaussian noise (dpsql.noise.make_mechanism)."""
        return self in (Mechanism.LAPLACE, Mechanism.GAUSSIAN, Mechanism.GAUSSIAN_CLASSIC)

    @property
    def gaussian(self) -> bool:
        """A Gaussian mechanism: it needs a delta."""
        return self in (Mechanism.GAUSSIAN, Mechanism.GAUSSIAN_CLASSIC)

    @property
    def l1(self) -> bool:
        """Calibrated to the L1 sensitivity (else the L2)."""
        return self is Mechanism.LAPLACE


@dataclass(frozen=True, slots=True)
class NoiseSpec:
    """The mechanism for one measure (or for partition selection)."""
    target: str           # measure name, or "_units" for partition selection
    mechanism: Mechanism  # laplace | gaussian | gaussian_classic | exponential (a quantile) | noisy_max (top-k)
    l1: float             # L1 sensitivity over all groups (L0 * Linf)
    l2: float             # L2 sensitivity over all groups (sqrt(L0) * Linf)
    linf: float           # per-group bound
    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", Mechanism(self.mechanism))

    @property
    def sensitivity(self) -> float:
        return self.l1 if self.mechanism.l1 else self.l2


class Part(Protocol):
    """What the analysis splits the budget over: a measure, a quantile or a distinct count."""
    name: str
    label: str

    def noise_spec(self, mechanism: str, rows: int, l0: int, epsilon: float, delta: float) -> NoiseSpec: ...


def additive_spec(name: str, linf: Fraction, mechanism: str, l0: int, epsilon: float, delta: float) -> NoiseSpec:
    """Laplace or Gaussian noise for a value that one unit moves by at most linf in each of l0 groups."""
    mech = Mechanism(mechanism)
    return NoiseSpec(name, mech, sens.l1(linf, l0), sens.l2(linf, l0), float(linf), epsilon,
                     delta if mech.gaussian else 0.0)


INT8_MAX = 2 ** 63 - 1


def fits_int8(*values: int) -> bool:
    return all(-INT8_MAX <= v <= INT8_MAX for v in values)


def _bigint(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=data_type("BIGINT"))


@dataclass(frozen=True, slots=True)
class Measure:
    """The fields every measure has; use a subclass. The released value is the engine's integer
    divided by `divisor`. What a measure is, is its class: the code asks it (its methods), never a
    tag."""
    name: str
    column: str | None         # None: COUNT(*)
    lo: Fraction = Fraction(0)  # per-row bounds in value units (on the scale grid)
    hi: Fraction = Fraction(0)
    scale: int = 1             # integers in the engine are value * scale
    label: str = ""
    input: exp.Expression | None = None     # the row expression aggregated (None: COUNT(*))
    filter: exp.Expression | None = None    # the aggregate's own FILTER (WHERE ...)
    derived: str | None = None # a row expression's derived range, for EXPLAIN DP
    cast_in_bounds: bool = False  # the scaled cast alone lands in [lo_int, hi_int] (dpsql.rewrite.clip.cast_in_bounds)

    scaled_input: ClassVar[bool] = False   # a sum: the rows subquery holds round(x * scale) when scale != 1

    @property
    def divisor(self) -> int:
        return self.scale

    @property
    def lo_int(self) -> int:
        return int(self.lo * self.scale)

    @property
    def hi_int(self) -> int:
        return int(self.hi * self.scale)

    @property
    def input_name(self) -> str:
        """The rows subquery's column holding the measure's input: _v3 reads _x3."""
        return "_x" + self.name[2:]

    @property
    def rereads_input(self) -> bool:
        """The rows subquery's scaled input is read more than once later (the integer clamp, a square)."""
        return not self.cast_in_bounds

    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        """Linf: the most one unit can move one group's measure (dpsql.analysis.sensitivity)."""
        raise NotImplementedError

    def noise_spec(self, mechanism: str, rows: int, l0: int, epsilon: float, delta: float) -> NoiseSpec:
        linf = self.per_group_bound(rows)
        if linf == 0:
            linf = Fraction(1, 10**6)   # a measure that cannot vary; keep the mechanisms well-defined
        return additive_spec(self.name, linf, mechanism, l0, epsilon, delta)

    def row_aggregate(self, d: EngineDialect) -> exp.Expression:
        """The aggregate over a unit's rows."""
        raise InternalError(f"{type(self).__name__} has no per-unit aggregate")

    def row_bounds(self) -> tuple[int, int]:
        """Bounds of one row's contribution to a sum measure, in the engine's integers."""
        return self.lo_int, self.hi_int

    def bounded_total(self, rows_per_unit: int, d: EngineDialect) -> exp.Expression:
        """Sum over units of each unit's contribution, clamped to max_rows_per_unit times the row bound.

        sum: the unit's sum of clamped exact row values, clamped again to [min(0, m*lo), max(0, m*hi)]
        (centered: m*[lo-hi, hi-lo]): a unit has from 1 to m rows in the group, so its sum lies
        anywhere between the one-row and the m-row extremes, and with a positive lo a unit with fewer
        than m rows sums below m*lo (the interval [m*lo, m*hi] would raise it: wrong answers on data
        bounding should leave alone). The interval contains 0 and has the same Linf as before
        (dpsql.analysis.sensitivity). Where a BIGINT sum wraps around on overflow (Spark: a sum across
        many units could, and one unit more would then move it by ~2**64), the clamped values are
        summed in the wide type (EngineDialect.cast_sum). A unit's own sum may still wrap there; the
        clamp bounds it anyway.
        """
        lo, hi = self.row_bounds()
        lo, hi = min(0, lo * rows_per_unit), max(0, hi * rows_per_unit)
        bounded = clamp(exp.column(self.name), lo, hi)
        if d.cast_sum:
            bounded = exp.Cast(this=bounded, to=data_type(d.wide_int, dialect=d.name))
        elif d.narrow_sums and fits_int8(lo, hi):
            # the clamped contribution is an integer in int8's range: the cast cannot fail, and the
            # SUM across units accumulates in the engine's cheap wide integer
            bounded = _bigint(bounded)
        return exp.Sum(this=bounded)

    def _clamped_input(self) -> exp.Expression:
        value = exp.column(self.input_name)
        if not self.cast_in_bounds:       # (the scaled cast of a DOUBLE lands in the bounds by itself:
            value = clamp(value, self.lo_int, self.hi_int)      # dpsql.analysis.bind.cast_in_bounds)
        return value


@dataclass(frozen=True, slots=True)
class Count(Measure):
    """COUNT(*) or COUNT(x) per unit and group, clamped to max_rows_per_unit, or to `cap` when it
    has its own (COUNT(DISTINCT unit): 1)."""
    cap: int | None = None     # per-unit count clamp instead of max_rows_per_unit


    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        return Fraction(self.cap if self.cap is not None else rows_per_unit)

    def row_aggregate(self, d: EngineDialect) -> exp.Expression:
        return exp.Count(this=exp.Star() if self.input is None else exp.column(self.input_name))

    def bounded_total(self, rows_per_unit: int, d: EngineDialect) -> exp.Expression:
        """LEAST(count, m), so each unit adds at most m."""
        # a count is never NULL, so LEAST's NULL handling does not matter here
        cap = self.cap if self.cap is not None else rows_per_unit
        return exp.Sum(this=exp.Least(this=exp.column(self.name), expressions=[exp.Literal.number(cap)],
                                      ignore_nulls=True))


@dataclass(frozen=True, slots=True)
class Sum(Measure):
    """SUM(x): each row clamped to [lo, hi]; Linf = m * max(|lo|, |hi|)."""
    scaled_input: ClassVar[bool] = True

    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        return rows_per_unit * max(abs(self.lo), abs(self.hi))

    def row_aggregate(self, d: EngineDialect) -> exp.Expression:
        return exp.Sum(this=self._clamped_input())


@dataclass(frozen=True, slots=True)
class CenteredSum(Sum):
    """AVG's (and VARIANCE's) numerator: the sum of 2x - (lo + hi), rows in [lo - hi, hi - lo];
    Linf = m * (hi - lo) / 2 in value units."""

    @property
    def divisor(self) -> int:
        return self.scale * 2

    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        return rows_per_unit * (self.hi - self.lo) / 2

    def row_bounds(self) -> tuple[int, int]:
        return self.lo_int - self.hi_int, self.hi_int - self.lo_int

    def row_aggregate(self, d: EngineDialect) -> exp.Expression:
        """2*SUM(v) - (lo + hi)*COUNT(v), or SUM(2v - (lo + hi)) where the terms fit a BIGINT."""
        value = self._clamped_input()
        lo_i, hi_i = self.lo_int, self.hi_int
        c = lo_i + hi_i
        if d.narrow_sums and fits_int8(2 * lo_i - c, 2 * hi_i - c, lo_i, hi_i):
            # SUM(2v - (lo + hi)) over the unit's non-NULL values is 2*SUM(v) - (lo+hi)*COUNT(v);
            # each term is a BIGINT in [lo - hi, hi - lo] (checked above to fit, with v itself), so
            # no row can overflow, and the engine's SUM widens (int8 -> 128-bit on PostgreSQL).
            term = exp.Sub(this=exp.Mul(this=_bigint(value), expression=exp.Literal.number(2)),
                           expression=exp.Literal.number(c) if c >= 0 else exp.Neg(this=exp.Literal.number(-c)))
            return exp.Sum(this=term)
        total = exp.Sum(this=value)
        offset = exp.Mul(this=d.wide(c), expression=exp.Count(this=exp.column(self.input_name)))
        return exp.Sub(this=exp.Mul(this=d.wide(2), expression=total), expression=offset)


@dataclass(frozen=True, slots=True)
class SquaredSum(Sum):
    """VARIANCE's and STDDEV's sum of squares (2x - (lo + hi))^2, rows in [0, (hi - lo)^2];
    Linf = m * ((hi - lo) / 2)^2 in value units."""

    @property
    def divisor(self) -> int:
        return 4 * self.scale * self.scale

    @property
    def rereads_input(self) -> bool:
        return True

    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        return rows_per_unit * (self.hi - self.lo) ** 2 / 4

    def row_bounds(self) -> tuple[int, int]:
        return 0, (self.hi_int - self.lo_int) ** 2

    def row_aggregate(self, d: EngineDialect) -> exp.Expression:
        # (2x - (lo + hi))^2 in the wide type: at most (hi - lo)^2 <= 4e34 < 1e38
        value = self._clamped_input()
        t = exp.Sub(this=exp.Mul(this=d.wide(2), expression=exp.Cast(this=value, to=data_type(
            d.wide_int, dialect=d.name))), expression=d.wide(self.lo_int + self.hi_int))
        return exp.Sum(this=exp.Mul(this=exp.Paren(this=t), expression=exp.Paren(this=t.copy())))


@dataclass(frozen=True, slots=True)
class SampleAggregate(Measure):
    """Sample-and-aggregate: the centered sum of k block values, each clamped to [lo, hi]; one unit
    moves one block of k, so Linf = (hi - lo) / k (dpsql.analysis.sample_aggregate). Its SQL is
    the block rewrite's (dpsql.rewrite.sample_aggregate)."""
    sample: Any = None         # dpsql.analysis.sample_aggregate.BlockAggregate


    @property
    def divisor(self) -> int:     # the centered sum of k block values: mean = mid + total / divisor
        return 2 * self.scale * self.sample.blocks

    def per_group_bound(self, rows_per_unit: int) -> Fraction:
        return (self.hi - self.lo) / self.sample.blocks

    def bounded_total(self, rows_per_unit: int, d: EngineDialect) -> exp.Expression:
        raise InternalError("a sample-and-aggregate measure has no per-unit total")
