"""COUNT(DISTINCT col) for a column that is not the privacy unit: a typed measure (`DistinctCount`).

Claim: after bounding, one unit changes a group's distinct count by at most m = max_rows_per_unit
(the relation's per-group row bound), in at most L0 groups, so the count has Linf = m, L1 = L0 * m,
L2 = sqrt(L0) * m and gets the query's mechanism (Laplace or Gaussian) like any count.
Argument: the rewrite (dpsql.rewrite.count_distinct) keeps, for each unit and group, at most m of
the unit's distinct non-NULL values with a row passing WHERE (the first m by a salted hash of unit
and value), and at most L0 groups per unit (the salted group rank, when a unit could reach more);
which values and groups a unit keeps depends only on its own rows and the per-query salt. A group's
count is the number of distinct values in the union of its units' kept sets. Adding a unit adds
its kept set (at most m values) to at most L0 groups and changes no other unit's set: each of
those counts rises by at most m (values others already hold add nothing) and no other count moves;
removing a unit is the reverse. (Wilson et al., PoPETs 2020, for the two bounding levels.)
Assumes: the engine's COUNT(DISTINCT) and the salted hash are deterministic functions of the rows.
Test: tests/analysis/test_distinct.py, tests/integration/test_quantiles.py (count distinct).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.measures import NoiseSpec, additive_spec
from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Ref


@dataclass(frozen=True, slots=True)
class DistinctCount:
    name: str                   # "_d0": the released count, Ref(name) in post-processing
    input: exp.Expression       # the qualified column
    label: str
    sql_type: str = ""          # the column's SQL type

    def noise_spec(self, mechanism: str, rows: int, l0: int, epsilon: float, delta: float) -> NoiseSpec:
        """The count's NoiseSpec (a measures.Part): Linf = rows (the claim above), the query's mechanism."""
        return additive_spec(self.name, Fraction(rows), mechanism, l0, epsilon, delta)


def aggregate(analysis, col: exp.Expression, cond: exp.Expression | None) -> tuple:
    """COUNT(DISTINCT col), col a declared column other than the unit."""
    if cond is not None:
        raise QueryRejected("COUNT(DISTINCT <column>) FILTER (...)", "not supported yet",
                            "put the condition in WHERE")
    if not isinstance(col, exp.Column):
        raise QueryRejected("COUNT(DISTINCT <expression>)", "count the distinct values of a column")
    d = analysis._input(col, "COUNT")
    found: dict = analysis.__dict__.setdefault("distincts", {})
    if d.key not in found:
        found[d.key] = DistinctCount(f"_d{len(found)}", d.sql, f"COUNT(DISTINCT {d.label})", d.sql_type)
    return Ref(found[d.key].name)


def plan_distincts(analysis) -> tuple[DistinctCount, ...]:
    return tuple(getattr(analysis, "distincts", {}).values())
