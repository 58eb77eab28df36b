"""Sample-and-aggregate as one SELECT: the engine aggregate per block of units, each block's value
clamped, and per group the centered sum of the k block values (dpsql.analysis.sample_aggregate
has the privacy argument). It replaces the general passes when the plan's measures are
sample-and-aggregate ones (the analysis admits no others beside them).

    SELECT CAST(_g0 AS TEXT) AS _k0,
           SUM(2 * clamp_int(NULLIF(_r0, NaN)) - (lo + hi)) AS _v0,       -- centered, exact integers
           SUM(_n) AS _units                                              -- partition selection only
    FROM (SELECT _g0, _blk, CORR(_a0, _b0) FILTER (WHERE _h) AS _r0,      -- one row per (group, block)
                 COUNT(DISTINCT _u) FILTER (WHERE _h) AS _n
          FROM (SELECT ..., ((hash(_u, salt) % k) + k) % k AS _blk,       -- the unit's block
                       DENSE_RANK() OVER (PARTITION BY _u ORDER BY [1 - _hg,] hash(_u, _g0, salt), _g0) AS _rank
                FROM (<rows: _u, _g0, clamped inputs _a0 _b0, _h [, _hg]>) AS _rows) AS _ranked
          WHERE _rank <= L0                                                -- group choice, when needed
          GROUP BY _g0, _blk) AS _blocks
    GROUP BY _g0

Totality: the inputs are clamped to their declared bounds (NULL stays NULL, NaN becomes the upper
bound) and converted to DOUBLE: on PostgreSQL through NUMERIC rounded to 15 decimals, since its
cast of a tiny NUMERIC to float8 raises an underflow; a NUMERIC with at most 15 decimals within
1e15 converts. The aggregates never raise on finite inputs within 1e15 (DuckDB returns NaN for a
zero variance, PostgreSQL and Spark NULL; accumulations stay far from the doubles' range). A block
value is NULLIF(v, NaN) (NaN equals NaN on all three engines), clamped in DOUBLE, scaled, cast to
BIGINT (|v| * scale < 10^17) and clamped again in integers; NULL counts 0, the midpoint. The block
number uses only remainders of the 64-bit hash by k (no ABS, which overflows on the smallest
BIGINT). DENSE_RANK ordered by the salted hash and then the keys gives distinct ranks to distinct
groups, so a unit keeps at most L0 groups even if two hashes tie.
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect
from dpsql.rewrite import relation as fr
from dpsql.rewrite.clip import clamp, scaled_value
from dpsql.rewrite.group_choice import salted_hash
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import measure_condition
from dpsql.rewrite.rows import _and, domain_filters, filters, subquery

_AGG = {"corr": exp.Corr, "covar_pop": exp.CovarPop, "covar_samp": exp.CovarSamp, "regr_slope": exp.RegrSlope,
        "regr_intercept": exp.RegrIntercept}


def applies(plan: QueryPlan) -> bool:
    return any(m.sample is not None for m in plan.measures)


def _double(value: exp.Expression, lo, hi, d: EngineDialect) -> exp.Expression:
    v = clamp(value, lo, hi)
    if d.real == "NUMERIC":
        v = exp.Round(this=exp.Cast(this=v, to=exp.DataType.build("NUMERIC")), decimals=exp.Literal.number(15))
    return exp.Cast(this=v, to=exp.DataType.build("DOUBLE", dialect=d.name))


def sample_aggregate(plan: QueryPlan, d: EngineDialect) -> exp.Select:
    rel = plan.relation
    measures = plan.measures
    k = measures[0].sample.blocks
    keys = [k_.name for k_ in plan.keys]
    col = exp.column
    # 1. rows: unit, keys, clamped inputs, the analyst's WHERE and FILTER flags
    cols: list[exp.Expression] = [exp.alias_(fr.unit_column(rel), "_u", copy=False)]
    cols += [exp.alias_(k_.expr.copy(), k_.name, copy=False) for k_ in plan.keys]
    names = ["_u", *keys]
    for i, m in enumerate(measures):
        s = m.sample
        cols.append(exp.alias_(_double(s.first.copy(), *s.first_bounds, d), f"_a{i}", copy=False))
        cols.append(exp.alias_(_double(s.second.copy(), *s.second_bounds, d), f"_b{i}", copy=False))
        names += [f"_a{i}", f"_b{i}"]
    if plan.where is not None:
        cols.append(exp.alias_(exp.Paren(this=fr.condition(plan.where, d)), "_h", copy=False))
        names.append("_h")
    for name, cond in filters(plan).values():
        cols.append(exp.alias_(exp.Paren(this=fr.condition(cond, d)), name, copy=False))
        names.append(name)
    conds = [c for c in (fr.not_null_unit(rel),) if c is not None] + domain_filters(plan)
    tree = fr.select(cols, rel, d, _and(conds), [])
    # 2. each unit's block, and (when needed) the rank of its groups
    if plan.group_choice and plan.where is not None:
        hg = exp.Window(this=exp.Max(this=exp.Case(ifs=[exp.If(this=col("_h"), true=exp.Literal.number(1))],
                                                   default=exp.Literal.number(0))),
                        partition_by=[col("_u"), *[col(k_) for k_ in keys]])
        tree = exp.Select(expressions=[col(n) for n in names] + [exp.alias_(hg, "_hg", copy=False)],
                          from_=exp.From(this=subquery(tree, "_rows")))
    h = salted_hash([col("_u")], d)
    block = exp.Mod(this=exp.Paren(this=exp.Add(this=exp.Paren(this=exp.Mod(this=h, expression=exp.Literal.number(k))),
                                                expression=exp.Literal.number(k))),
                    expression=exp.Literal.number(k))
    ranked = [col(n) for n in names] + [exp.alias_(block, "_blk", copy=False)]
    if plan.group_choice:
        order = []
        if plan.where is not None:
            order.append(exp.Ordered(this=exp.Sub(this=exp.Literal.number(1), expression=col("_hg"))))
        order.append(exp.Ordered(this=salted_hash([col("_u"), *[col(k_) for k_ in keys]], d)))
        order += [exp.Ordered(this=col(k_)) for k_ in keys]
        rank = exp.Window(this=exp.Anonymous(this="DENSE_RANK"), partition_by=[col("_u")],
                          order=exp.Order(expressions=order))
        ranked.append(exp.alias_(rank, "_rank", copy=False))
    tree = exp.Select(expressions=ranked, from_=exp.From(this=subquery(tree, "_rows")))
    # 3. one row per (group, block): the engine aggregate over the block's rows
    blocks = [col(k_) for k_ in keys] + [col("_blk")]
    nan = exp.Cast(this=exp.Literal.string("NaN"), to=exp.DataType.build("DOUBLE", dialect=d.name))
    for i, m in enumerate(measures):
        agg = _AGG[m.sample.function](this=col(f"_a{i}"), expression=col(f"_b{i}"))
        blocks.append(exp.alias_(exp.Nullif(this=fr.filtered(agg, measure_condition(plan, m)), expression=nan.copy()),
                                 f"_r{i}", copy=False))
    if plan.selection is not None:
        units = exp.Count(this=exp.Distinct(expressions=[col("_u")]))
        blocks.append(exp.alias_(fr.filtered(units, None if plan.where is None else col("_h")), "_n", copy=False))
    args: dict = {"expressions": blocks, "from_": exp.From(this=subquery(tree, "_ranked")),
                  "group": exp.Group(expressions=[col(k_) for k_ in keys] + [col("_blk")])}
    if plan.group_choice:
        args["where"] = exp.Where(this=exp.LTE(this=col("_rank"), expression=exp.Literal.number(plan.l0)))
    tree = exp.Select(**args)
    # 4. per group: the centered sum of the clamped block values (NULL and NaN: 0, the midpoint)
    out: list[exp.Expression] = [key_text(i, col(k_)) for i, k_ in enumerate(keys)]
    for i, m in enumerate(measures):
        c = scaled_value(col(f"_r{i}"), m.lo, m.hi, m.scale, d)
        centered = exp.Sub(this=exp.Mul(this=d.wide(2), expression=exp.Cast(
            this=c, to=exp.DataType.build(d.wide_int, dialect=d.name))), expression=d.wide(m.lo_int + m.hi_int))
        out.append(exp.alias_(exp.Sum(this=centered), m.name, copy=False))
    if plan.selection is not None:
        out.append(exp.alias_(exp.Sum(this=col("_n")), "_units", copy=False))
    args = {"expressions": out, "from_": exp.From(this=subquery(tree, "_blocks"))}
    if keys:
        args["group"] = exp.Group(expressions=[col(k_) for k_ in keys])
    return exp.Select(**args)
