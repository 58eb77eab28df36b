"""Sample-and-aggregate for engine aggregates with no closed-form sensitivity: CORR(x, y),
COVAR_POP(x, y), COVAR_SAMP(x, y), REGR_SLOPE(y, x), REGR_INTERCEPT(y, x).

Claim: releasing  mid + (1/k) * sum_b (clamp(f(block_b), lo, hi) - mid) + noise  with noise calibrated
to sensitivity L0 * (hi - lo) / k is differentially private at the mechanism's epsilon (and delta),
where f is the engine aggregate, the units are split into k disjoint blocks by a salted hash of
the unit, a block with no defined value (too few rows, zero variance: NULL or NaN on the engines)
counts as the midpoint mid = (lo + hi) / 2, and each unit reaches at most L0 groups.

Argument (Nissim, Raskhodnikova & Smith, "Smooth sensitivity and sampling in private data
analysis", STOC 2007, section 4; Smith, "Privacy-preserving statistical estimation with optimal
convergence rates", STOC 2011): a unit's rows all carry the unit's own value, so they all land in
the block hash(unit, salt) mod k, whatever the other units do; the salt is a fresh CSPRNG secret
per query, never chosen by the analyst (dpsql.rewrite.group_choice). Adding or removing one unit
therefore changes the rows of exactly one block per group it reaches, and the block assignment of
every other unit not at all. A block's contribution, whatever f returns (any double, NULL, NaN,
+-Infinity), is mapped by a total function into [lo, hi] (NULL and NaN to mid, the rest clamped),
so one block moves the mean of k by at most (hi - lo) / k. The group choice (at most L0 groups per
unit, chosen by the unit's own rows and a salt) is the one of dpsql.rewrite.group_choice, so over
all groups the L1 distance is at most L0 (hi - lo) / k and the L2 distance sqrt(L0) (hi - lo) / k:
the Laplace and Gaussian mechanisms apply as for every other measure (dpsql.analysis.sensitivity).
A group with no rows at all is the mean of k midpoints, i.e. the centered sum 0, which is what the
Session uses for a public group the engine did not return. The privacy does not depend on the
range [lo, hi] being right for f (a wrong range only biases the answer); it depends only on the
clamp, which the rewrite applies to every block value (dpsql.rewrite.sample_aggregate).

Why the midpoint for an undefined block: any fixed value in [lo, hi] keeps the bound above; the
midpoint is the one that minimises the worst-case bias it adds, and it is what a public group
with no rows releases, so empty and undefined blocks agree.

Rows per unit: a block's value is clamped whatever the unit's rows, so the per-unit row clamp
(max_rows_per_unit) is not needed for the bound; the inputs are still clamped to their declared
bounds (they give COVAR's range, and keep the engines' accumulations finite: bounds are within
1e15, so sums of squares stay far below the doubles' range and PostgreSQL's overflow checks).

Ranges: CORR is in [-1, 1]; |COVAR_POP| <= (hi_x - lo_x)(hi_y - lo_y) / 4 (Cauchy-Schwarz with
each variance at most a quarter of its squared width, Popoviciu) and COVAR_SAMP at most twice that
(the n/(n-1) factor, n >= 2); REGR_SLOPE and REGR_INTERCEPT have no range implied by the bounds
(a tiny variance of x makes the slope arbitrarily large), so the policy must declare one
([functions] regr_slope = { lower = ..., upper = ... }). A declared range overrides a derived one.

Beside other aggregates: each sample-and-aggregate measure is one more measure of the query,
with its share of the query's epsilon as every measure has (dpsql.analysis.budget.Budget._finish), and
the same L0 and partition selection; the rewrite joins the block sums to the other measures by
the group keys (dpsql.rewrite.sample_aggregate.combined, with the composition argument).

Accuracy: the estimate is the mean of k estimates on n/k units each (its own bias and variance
are those of f on a sample of n/k), plus noise of scale L0 (hi - lo) / (k epsilon).
Test: tests/stats/test_sample_aggregate_neighbours.py (neighbouring datasets, accuracy).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.measures import SampleAggregate
from dpsql.analysis.per_unit import exact_bounds
from dpsql.errors import QueryRejected
from dpsql.policy import exact
from dpsql.postprocess.expr import Add, Clamp, Expr, Lit, Ref

FUNCTIONS: dict[type, str] = {exp.Corr: "corr", exp.CovarPop: "covar_pop", exp.CovarSamp: "covar_samp",
                              exp.RegrSlope: "regr_slope", exp.RegrIntercept: "regr_intercept"}
AGGREGATES = tuple(FUNCTIONS)
MAX_BOUND = Fraction(10) ** 15


@dataclass(frozen=True, slots=True)
class BlockAggregate:
    """What one sample-and-aggregate measure (measures.SampleAggregate) runs per block: the engine aggregate `function(first, second)` (arguments
    in the analyst's order), each argument clamped to its bounds, run per block of k."""
    function: str
    first: exp.Expression
    second: exp.Expression
    first_bounds: tuple[Fraction, Fraction]
    second_bounds: tuple[Fraction, Fraction]
    blocks: int
    range_source: str           # where [lo, hi] comes from, for EXPLAIN DP


def _range(fname: str, declared, a, b) -> tuple[Fraction, Fraction, str]:
    if declared is not None:
        return exact(declared[0]), exact(declared[1]), "declared in the policy's [functions]"
    if fname == "corr":
        return Fraction(-1), Fraction(1), "a correlation is in [-1, 1]"
    if fname in ("covar_pop", "covar_samp"):
        w = (a.hi - a.lo) * (b.hi - b.lo) / (4 if fname == "covar_pop" else 2)
        return -w, w, "derived from the arguments' bounds (|covariance| <= width_x * width_y / " + \
            ("4)" if fname == "covar_pop" else "2 for the sample covariance)")
    raise QueryRejected(f"{fname.upper()}(...)", "its result has no range that follows from the bounds",
                        f"ask the data owner to declare one: [functions] {fname} = {{ lower = ..., upper = ... }}")


def measure(an, node: exp.Expression, cond: exp.Expression | None, suffix: str) -> Expr:
    """The plan's expression for one sample-and-aggregate call (an: the running analysis)."""
    fname = FUNCTIONS[type(node)]
    what = fname.upper()
    funcs = an.policy.functions
    if fname not in funcs.sample_aggregate:
        raise QueryRejected(f"{what}(...)", "it has no closed-form sensitivity, and the policy does not allow it "
                            "through sample-and-aggregate",
                            f"ask the data owner to list {fname} under [functions] sample_aggregate")
    args = []
    for arg in (node.this, node.expression):
        if arg is None:
            raise QueryRejected(f"{what} with one argument", f"{what} takes two")
        d = an._input(arg, what)
        if not d.bounded:
            raise QueryRejected(f"{what}({d.label})", "the column has no declared bounds",
                                "ask the data owner to declare lower and upper bounds")
        if d.kind != "num":
            raise QueryRejected(f"{what}({d.label})", "the argument is not numeric")
        if max(abs(d.lo), abs(d.hi)) > MAX_BOUND:
            raise QueryRejected(f"{what}({d.label})", "the argument's range goes beyond 1e15")
        args.append(d)
    a, b = args
    lo, hi, source = _range(fname, funcs.ranges.get(fname), a, b)
    if max(abs(lo), abs(hi)) > MAX_BOUND:
        raise QueryRejected(f"{what}({a.label}, {b.label})", "its derived range goes beyond 1e15",
                            f"ask the data owner to declare a narrower one: [functions] {fname} = "
                            "{ lower = ..., upper = ... }")
    lo, hi, scale = exact_bounds(lo, hi, "DOUBLE", False)
    k = funcs.blocks
    label = f"{what}({a.label}, {b.label}){suffix}"
    key = ("sample", fname, a.key, b.key, cond.sql("postgres") if cond is not None else None)
    if key not in an.measures:
        # The arguments are clamped to their ranges as terminating decimals (exact SQL literals):
        # a derived range such as income / 7's is widened outward to exact_bounds' grid. The
        # clamp only keeps each block's input finite and bounded; the bound on one unit's
        # influence is the output clamp to [lo, hi] (the claim above), whatever the inputs.
        sa = BlockAggregate(fname, a.sql, b.sql, exact_bounds(a.lo, a.hi, "DOUBLE", False)[:2],
                             exact_bounds(b.lo, b.hi, "DOUBLE", False)[:2], k, source)
        derived = (f"sample-and-aggregate over k = {k} blocks of units, each block's {what} clamped to "
                   f"[{_num(lo)}, {_num(hi)}] ({source}); undefined blocks count as the midpoint")
        an.measures[key] = SampleAggregate(f"_v{len(an.measures)}", label, lo, hi, scale, label, None, cond,
                                           derived=derived, sample=sa)
    m = an.measures[key]
    mid = (m.lo + m.hi) / 2
    value: Expr = Ref(m.name)
    if mid != 0:
        value = Add(Lit(float(mid)), value)
    return Clamp(value, float(m.lo), float(m.hi))


def check(measures) -> None:
    """Sample-and-aggregate measures may stand beside ordinary ones (COUNT, SUM, AVG, VARIANCE...):
    each measure is its own mechanism at its share of the query's epsilon (and delta), so the
    query composes sequentially (dpsql.rewrite.sample_aggregate.combined has the argument); the
    analysis refuses them beside quantiles and COUNT(DISTINCT col) only (Analysis.plan)."""
    return None


def _num(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"
