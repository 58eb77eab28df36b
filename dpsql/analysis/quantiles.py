"""Quantile aggregates: PERCENTILE_CONT/PERCENTILE_DISC (q) WITHIN GROUP (ORDER BY x), MEDIAN(x),
quantile_cont(x, q) / quantile_disc(x, q) (DuckDB's spelling), and MIN(x) / MAX(x) as the 0 and 1
quantiles.

Each is a typed measure (`Quantile`) released by the exponential mechanism over a histogram of
B equal-width bins of x's declared (or derived) range, computed in the engine after per-unit
bounding (dpsql.rewrite.quantiles) and chosen in Python from the B counts only
(dpsql.noise.exponential, where the privacy argument is written). The released value is a DP
estimate: MIN and MAX in particular are estimates of the 0 and 1 quantiles, not the exact extremes
(no DP mechanism can release those: one person can move them anywhere in the range).

x must be a numeric column with declared bounds, or a row expression with a derived range
(dpsql.analysis.expressions). DESC in WITHIN GROUP reads the quantile from the top: q -> 1 - q.
q must be a numeric literal in [0, 1]. An aggregate FILTER on a quantile is refused (for now).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.literals import NUMBER
from dpsql.analysis.measures import Mechanism, NoiseSpec
from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Ref

BINS = 1024                         # equal-width bins over the range (the grid of the estimate)
MAX_BOUND = Fraction(10) ** 300     # bins are computed in DOUBLE on DuckDB/Spark: keep far from overflow

_ANON = {"quantile_cont": "QUANTILE_CONT", "quantile_disc": "QUANTILE_DISC", "quantile": "QUANTILE_CONT",
         "median": "MEDIAN"}


@dataclass(frozen=True, slots=True)
class Quantile:
    """One released quantile: q of `input` over [lo, hi] (its histogram column `hist`)."""
    name: str                       # "_q0": the released value, Ref(name) in post-processing
    hist: str                       # "_qh0": the engine's histogram column (shared by equal inputs)
    q: Fraction
    lo: Fraction
    hi: Fraction
    input: exp.Expression           # the row expression: a qualified column or a derived expression
    label: str                      # for people: MEDIAN(income)
    derived: str | None = None
    bins: int = BINS

    def noise_spec(self, mechanism: str, rows: int, l0: int, epsilon: float, delta: float) -> NoiseSpec:
        """The quantile's NoiseSpec (a measures.Part): the exponential mechanism at the measure's
        epsilon share, with rank sensitivity `rows` per group (each unit's per-group row bound) over
        `l0` groups; the query's mechanism and delta do not apply."""
        return NoiseSpec(self.name, Mechanism.EXPONENTIAL, float(rows * l0), rows * math.sqrt(l0), float(rows),
                         epsilon, 0.0)


def is_quantile(node: exp.Expression) -> bool:
    """Whether the analyst's node is one of the quantile aggregates (top-level MIN/MAX included)."""
    if isinstance(node, exp.WithinGroup):
        return isinstance(node.this, (exp.PercentileCont, exp.PercentileDisc))
    if isinstance(node, (exp.Median, exp.Min, exp.Max, exp.Quantile)):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in _ANON


def _literal_q(node: exp.Expression | None, what: str) -> Fraction:
    neg = False
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        neg, node = True, node.this
    if not (isinstance(node, exp.Literal) and not node.is_string and NUMBER.fullmatch(node.this)):
        raise QueryRejected(f"{what} with a non-literal fraction", "the quantile must be a number in [0, 1]")
    q = -Fraction(node.this) if neg else Fraction(node.this)
    if not 0 <= q <= 1:
        raise QueryRejected(f"{what} with a fraction outside [0, 1]", "the quantile must be a number in [0, 1]")
    return q


def parse(node: exp.Expression) -> tuple[str, Fraction, exp.Expression]:
    """(name for people, q, the aggregated expression) of a quantile node; refuses other shapes."""
    if isinstance(node, exp.WithinGroup):
        fn = node.this
        what = "PERCENTILE_CONT" if isinstance(fn, exp.PercentileCont) else "PERCENTILE_DISC"
        if fn.expressions or fn.args.get("expression"):
            raise QueryRejected(f"{what} with several fractions", "ask for one quantile per aggregate")
        q = _literal_q(fn.this, what)
        order = node.expression
        items = order.expressions if isinstance(order, exp.Order) else []
        if len(items) != 1 or not isinstance(items[0], exp.Ordered):
            raise QueryRejected(f"{what} WITHIN GROUP", "order by exactly one expression")
        if items[0].args.get("desc"):
            q = 1 - q
        return what, q, items[0].this
    if isinstance(node, (exp.Min, exp.Max)):
        what = "MIN" if isinstance(node, exp.Min) else "MAX"
        if node.expressions:
            raise QueryRejected(f"{what} with several arguments", "not part of the accepted subset")
        return what, Fraction(0 if what == "MIN" else 1), node.this
    if isinstance(node, exp.Median):
        return "MEDIAN", Fraction(1, 2), node.this
    if isinstance(node, exp.Quantile):
        return "QUANTILE_CONT", _literal_q(node.args.get("quantile"), "QUANTILE_CONT"), node.this
    what = _ANON[node.name.lower()]
    args = node.expressions
    if what == "MEDIAN":
        if len(args) != 1:
            raise QueryRejected("MEDIAN with several arguments", "MEDIAN takes one expression")
        return what, Fraction(1, 2), args[0]
    if len(args) != 2:
        raise QueryRejected(f"{what}", f"write {what.lower()}(x, q) with one fraction q in [0, 1]")
    return what, _literal_q(args[1], what), args[0]


def aggregate(analysis, node: exp.Expression) -> tuple:
    """The post-processing reference of a quantile aggregate; records its Quantile on the analysis
    (analysis.quantiles: label -> Quantile)."""
    what, q, arg = parse(node)
    if isinstance(arg, exp.Distinct):
        raise QueryRejected(f"{what}(DISTINCT ...)", "not part of the accepted subset")
    d = analysis._input(arg, what)
    if d.kind != "num":
        hint = None
        if d.kind in ("date", "timestamp"):
            # A date's MIN/MAX would need the exponential mechanism over its declared date range and a
            # typed release of the date chosen; until then, the accepted numeric forms of the same question.
            hint = (f"estimate a number of the {d.kind} instead, e.g. {what}(EXTRACT(YEAR FROM {d.label})) "
                    f"(its declared date bounds give the range), or count by period: GROUP BY "
                    f"DATE_TRUNC('month', {d.label})")
        raise QueryRejected(f"{what}({d.label})", "quantiles are released for numeric expressions only (MIN and "
                            "MAX are DP quantile estimates)", hint)
    if not d.bounded:
        raise QueryRejected(f"{what}({d.label})", "the column has no declared bounds, so the exponential "
                            "mechanism has no range to choose from",
                            "ask the data owner to declare lower and upper bounds")
    lo, hi = _decimal(Fraction(d.lo), up=False), _decimal(Fraction(d.hi), up=True)
    if not lo < hi:
        raise QueryRejected(f"{what}({d.label})", "its range holds a single value; nothing to estimate")
    if max(abs(lo), abs(hi)) > MAX_BOUND:
        raise QueryRejected(f"{what}({d.label})", "its declared range is too wide for the quantile histogram")
    qs: dict = analysis.__dict__.setdefault("quantiles", {})
    hists: dict = analysis.__dict__.setdefault("quantile_hists", {})
    hist = hists.setdefault(d.key, f"_qh{len(hists)}")
    pretty = {Fraction(1, 2): "MEDIAN"}.get(q) if what == "MEDIAN" else None
    label = pretty and f"MEDIAN({d.label})" or (f"{what}({d.label})" if what in ("MIN", "MAX")
                                                 else f"{what}({float(q):g}) OF {d.label}")
    key = (d.key, q)
    if key not in qs:
        qs[key] = Quantile(f"_q{len(qs)}", hist, q, lo, hi, d.sql, label, d.derived)
    return Ref(qs[key].name)


def _decimal(x: Fraction, *, up: bool) -> Fraction:
    """x itself if it is a terminating decimal (SQL literals are exact decimals), else x rounded
    outward to 10^-12 (a derived range such as age / 3's): the range only widens, so every value
    stays inside it."""
    den = x.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den == 1:
        return x
    scale = 10 ** 12
    n = x * scale
    return Fraction(-((-n.numerator) // n.denominator) if up else n.numerator // n.denominator, scale)


def plan_quantiles(analysis) -> tuple[Quantile, ...]:
    return tuple(getattr(analysis, "quantiles", {}).values())
