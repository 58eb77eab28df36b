"""The count query of automatic clipping bounds (dpsql.analysis.auto_bounds): for every candidate
bound, the number of units with a value above it, in one engine query that returns one row."""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.auto_bounds import AutoBound
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.sql import number
from dpsql.dialects import EngineDialect
from dpsql.dialects import dialect as engine_dialect
from dpsql.rewrite import relation as fr


def count_select(plan: QueryPlan, auto: AutoBound, d: EngineDialect) -> exp.Select:
    """SELECT COUNT(DISTINCT CASE WHEN [<WHERE> AND] col > c_j THEN unit END) AS _c<j>, ... FROM <relation>
    WHERE unit IS NOT NULL: per candidate, the units with a (passing) value above it. Total: a
    comparison of a declared numeric column with a numeric literal (as every clamp does: NULL
    is not counted, NaN counts as above every candidate), and a COUNT(DISTINCT)."""
    rel = plan.relation
    unit = fr.unit_column(rel)
    col = exp.column(auto.column, table=auto.alias)
    cols = []
    for j, c in enumerate(auto.candidates):
        cond: exp.Expression = exp.GT(this=col.copy(), expression=number(c))
        if plan.where is not None:
            cond = exp.And(this=exp.Paren(this=fr.condition(plan.where, d)), expression=cond)
        case = exp.Case(ifs=[exp.If(this=cond, true=unit.copy())])
        cols.append(exp.alias_(exp.Count(this=exp.Distinct(expressions=[case])), f"_c{j}", copy=False))
    return fr.select(cols, rel, d, fr.not_null_unit(rel), [])


def count_sql(plan: QueryPlan, auto: AutoBound, dialect: str) -> str:
    return count_select(plan, auto, engine_dialect(dialect)).sql(dialect)
