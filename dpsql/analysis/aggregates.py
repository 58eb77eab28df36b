"""The aggregates of a private query's SELECT list, HAVING and ORDER BY, collected as typed
measures (dpsql.analysis.measures): COUNT, SUM, AVG, VARIANCE/STDDEV, and the hand-offs to
COUNT(DISTINCT col) (dpsql.analysis.distinct), the quantiles (dpsql.analysis.quantiles) and
sample-and-aggregate (dpsql.analysis.sample_aggregate). A mixin of dpsql.analysis.private_query.Analysis:
it reads self.resolve, self.rel, self._expressions and self.measures."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis import distinct as distinct_counts
from dpsql.analysis import sample_aggregate as sa
from dpsql.analysis.derived import Derived
from dpsql.analysis.measures import CenteredSum, Count, Measure, SquaredSum, Sum
from dpsql.analysis.plan import Expr
from dpsql.analysis.per_unit import cast_in_bounds, exact_bounds
from dpsql.analysis.sqltypes import NUMERIC, family
from dpsql.analysis.subset import refuse_expression
from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Avg, Ref, Var

AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop,
               exp.StddevSamp) + sa.AGGREGATES



VAR_LIMIT = 10 ** 17        # |bounds| of a VAR/STDDEV argument (its squares stay below 4e34)


@dataclass(frozen=True)
class _Input:
    """An aggregate's input: SQL, a label for people, an identity for deduplication, its kind, SQL
    type and range (whole: integer-typed with whole bounds, summed as itself)."""
    sql: exp.Expression
    label: str
    key: tuple
    kind: str
    sql_type: str
    lo: Fraction | None
    hi: Fraction | None
    whole: bool
    derived: str | None = None

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None



def describe(d: Derived) -> str:
    """A derived expression's facts for EXPLAIN DP."""
    out = []
    if d.lo is not None and d.hi is not None:
        out.append(f"range [{_num(d.lo)}, {_num(d.hi)}]")
    if d.span is not None:
        out.append(f"dates [{d.span[0]}, {d.span[1]}]")
    if d.domain is not None:
        vals = ", ".join(repr(v) if isinstance(v, (str, bool)) else str(v) if isinstance(v, _dt.date) else _num(v)
                         for v in list(d.domain)[:6])
        out.append(f"domain of {len(d.domain)}: {{{vals}{', ...' if len(d.domain) > 6 else ''}}}")
    return "; ".join(out) or "no bounds"



def _num(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


class Aggregates:
    """Each aggregate call as measures and its post-processing expression."""

    def _aggregate(self, node: exp.Expression, cond: exp.Expression | None = None) -> Expr:
        """An aggregate of a column or a row expression, with its own FILTER condition if any."""
        arg = node.this
        fname = node.sql_name()
        suffix = f" FILTER (WHERE {cond.sql('postgres')})" if cond is not None else ""
        if isinstance(node, sa.AGGREGATES):
            return sa.measure(self, node, cond, suffix)
        if node.args.get("expressions") or (isinstance(node, exp.Count) and node.expressions):
            raise QueryRejected(f"{fname} with several arguments", "not part of the accepted subset")
        if isinstance(arg, exp.Distinct):
            if not isinstance(node, exp.Count) or len(arg.expressions) != 1:
                raise QueryRejected(f"{fname}(DISTINCT ...)", "of the DISTINCT aggregates only COUNT(DISTINCT col) "
                                    "is supported yet (its values are taken over each person's bounded rows; "
                                    "the other aggregates do not have that rewrite)",
                                    f"{fname}(col) bounds each person's rows; COUNT(DISTINCT col) counts the values")
            col = arg.expressions[0]
            if not isinstance(col, exp.Column) or self.resolve(col, "COUNT")[0] not in self.rel.unit_class:
                return distinct_counts.aggregate(self, col, cond)     # another column: dpsql.analysis.distinct
            # each unit adds 1 to each group it has a (passing) row in: a count clamped to 1
            return Ref(self._measure(Count, None, f"COUNT(DISTINCT {col.name}){suffix}", cond, cap=1).name)
        if isinstance(node, exp.Count):
            if isinstance(arg, exp.Star):
                return Ref(self._measure(Count, None, f"COUNT(*){suffix}", cond).name)
            d = self._input(arg, "COUNT")
            return Ref(self._measure(Count, d, f"COUNT({d.label}){suffix}", cond).name)
        d = self._input(arg, fname)
        if not d.bounded:
            raise QueryRejected(f"{fname}({d.label})", "the column has no declared bounds, so one person's "
                                "influence on the result is unbounded",
                                "ask the data owner to declare lower and upper bounds")
        if d.kind != "num":
            raise QueryRejected(f"{fname}({d.label})", "the column is not numeric")
        if isinstance(node, exp.Sum):
            return Ref(self._measure(Sum, d, f"SUM({d.label}){suffix}", cond).name)
        s = self._measure(CenteredSum, d, f"{fname.upper()}({d.label}) centered sum{suffix}", cond)
        c = self._measure(Count, d, f"COUNT({d.label}){suffix}", cond)
        if isinstance(node, exp.Avg):
            return Avg(s.name, c.name, float(s.lo), float(s.hi))
        if max(abs(d.lo), abs(d.hi)) >= VAR_LIMIT:
            # The squared sum adds (2x - (lo + hi))^2 in the engine's 128-bit (or 38-digit) type
            # (dpsql.analysis.measures.SquaredSum.row_aggregate): with |lo|, |hi| < 1e17 (and so their
            # scaled integers, dpsql.analysis.bind.exact_bounds), each term is at most 4e34 < 1e38
            # on every row; wider bounds could overflow on some rows (an error oracle).
            raise QueryRejected(f"{fname}({d.label})", f"its bounds reach {float(max(abs(d.lo), abs(d.hi))):g}: the "
                                "squares of values of 1e17 or more could overflow the engine's numbers",
                                "scale the value down, or clamp it with LEAST/GREATEST")
        q = self._measure(SquaredSum, d, f"{fname.upper()}({d.label}) squared sum{suffix}", cond)
        sample = isinstance(node, (exp.Variance, exp.Stddev, exp.StddevSamp))
        root = isinstance(node, (exp.Stddev, exp.StddevSamp, exp.StddevPop))
        return Var(s.name, q.name, c.name, float(s.lo), float(s.hi), sample, root)

    def _input(self, arg: exp.Expression, what: str) -> _Input:
        """What an aggregate reads: a declared column (as it is), or a row expression over declared
        columns, clamped and typed so that it cannot fail on any row (dpsql.analysis.expressions)."""
        if isinstance(arg, exp.Column):
            if isinstance(arg.this, exp.Star):
                raise refuse_expression(exp.Star(), what)
            ref, info = self.resolve(arg, what)
            lo = hi = None
            if info.bounded:
                lo, hi = info.range()
            fam = family(info.sql_type)
            kind = "num" if fam in NUMERIC else fam
            return _Input(exp.column(ref[1], table=ref[0]), info.name, ("col", ref), kind, info.sql_type, lo, hi,
                          info.whole_bounds and fam == "int")
        d = self._expressions(what).derive(arg)
        if d.refs & self.rel.unit_class and what != "COUNT":
            raise QueryRejected(f"{what} of an expression of the privacy unit", "the unit is not a value to add up")
        return _Input(d.sql, arg.sql("postgres"), ("expr", arg.sql("postgres")), d.kind, d.sql_type, d.lo, d.hi,
                      d.integral and d.lo is not None and d.lo.denominator == 1 and d.hi.denominator == 1,
                      describe(d))

    def _measure(self, cls: type[Measure], d: _Input | None, label: str, cond: exp.Expression | None = None,
                 *, cap: int | None = None) -> Measure:
        """The measure of class cls over input d (None: COUNT(*)), shared by equal aggregates."""
        key = (cls, d.key if d is not None else None, cap, cond.sql("postgres") if cond is not None else None)
        if key not in self.measures:
            name = f"_v{len(self.measures)}"
            column = d.label if d is not None else None
            if issubclass(cls, Sum):
                assert d is not None and d.lo is not None
                lo, hi, scale = exact_bounds(d.lo, d.hi, d.sql_type, d.whole)
                m: Measure = cls(name, column, lo, hi, scale, label, d.sql, cond, derived=d.derived,
                                 cast_in_bounds=scale != 1 and cast_in_bounds(d.sql_type, lo, hi, scale))
            else:
                m = Count(name, column, label=label, input=d.sql if d is not None else None, filter=cond,
                          cap=cap, derived=d.derived if d is not None else None)
            self.measures[key] = m
        return self.measures[key]
