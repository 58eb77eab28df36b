"""Group keys: public domains, and the unit count that partition selection needs.

A key column with a declared public domain releases exactly the domain's values:
rows with other values (or NULL) are filtered out in the engine, and the Session fills
in the domain values that have no rows (their measures are zero, then noised), so
which keys appear never depends on the data. Keys without a declared domain are
released only through thresholded partition selection on the number of distinct
units in the group (`_units`, see analysis.sensitivity.selection_threshold).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan


def key_text(i: int, value: exp.Expression) -> exp.Expression:
    """CAST(key AS TEXT) AS _k<i>: every group key comes back as text.

    Why: the Session receives every candidate group before partition selection decides which
    are released, so nothing it does with a key may fail on some value. A cast to text is
    total on every engine (DuckDB and Spark print every value; PostgreSQL's output functions
    print 'infinity', BC dates, years past 9999 and NUMERIC NaN), and the driver always loads
    text, where psycopg would raise on a date it cannot represent. The Session turns text into
    typed values only for released keys, and never by a conversion that can fail
    (dpsql.session._typed_key). On PostgreSQL the cast also drops CHAR(n)'s padding, so a
    padded value matches its public domain."""
    return exp.alias_(exp.Cast(this=value, to=exp.DataType.build("TEXT")), f"_k{i}", copy=False)


def domain_filter(plan: QueryPlan) -> list[exp.Expression]:
    """`key IN (domain)` for each key with a public domain."""
    out = []
    for k in plan.keys:
        if k.domain is not None:
            items = [exp.Literal.string(v) if isinstance(v, str) else exp.Literal.number(v) for v in k.domain]
            out.append(exp.In(this=exp.column(k.column), expressions=items))
    return out


def opaque(conditions: list[exp.Expression]) -> exp.Expression:
    """CASE WHEN a AND b THEN TRUE ELSE FALSE END: the same filter, in a form the
    optimizer does not push below the aggregation (it is meant for groups, not rows)."""
    cond = conditions[0]
    for c in conditions[1:]:
        cond = exp.And(this=cond, expression=c)
    return exp.Case(ifs=[exp.If(this=cond, true=exp.true())], default=exp.false())


def units_column(plan: QueryPlan) -> list[exp.Expression]:
    """COUNT(*) AS _units in the final aggregation, when partition selection needs it."""
    if plan.selection is None:
        return []
    return [exp.alias_(exp.Count(this=exp.Star()), "_units", copy=False)]
