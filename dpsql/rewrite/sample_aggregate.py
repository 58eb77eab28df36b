"""Sample-and-aggregate as one SELECT: the engine aggregate per block of units, each block's value
clamped, and per group the centered sum of the k block values (dpsql.analysis.sample_aggregate
has the privacy argument). It replaces the general passes when every measure of the plan is a
sample-and-aggregate one; beside ordinary measures (COUNT, SUM, AVG, VARIANCE...) the two
rewrites are joined by the group keys in the engine (`combined`, below).

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

from dataclasses import replace

from sqlglot import exp

from dpsql.analysis.measures import SampleAggregate
from dpsql.analysis.plan import QueryPlan
from dpsql.dialects import EngineDialect, data_type
from dpsql.rewrite import relation as fr
from dpsql.rewrite.clip import clamp, scaled_value
from dpsql.rewrite.group_choice import salted_hash, unit_keys_hash, unit_type
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import measure_condition
from dpsql.rewrite.rows import _and, domain_filters, filters, subquery

_AGG = {"corr": exp.Corr, "covar_pop": exp.CovarPop, "covar_samp": exp.CovarSamp, "regr_slope": exp.RegrSlope,
        "regr_intercept": exp.RegrIntercept}


def applies(plan: QueryPlan) -> bool:
    return any(isinstance(m, SampleAggregate) for m in plan.measures)


def _double(value: exp.Expression, lo, hi, d: EngineDialect) -> exp.Expression:
    v = clamp(value, lo, hi)
    if d.real == "NUMERIC":
        v = exp.Round(this=exp.Cast(this=v, to=data_type("NUMERIC")), decimals=exp.Literal.number(15))
    return exp.Cast(this=v, to=data_type("DOUBLE", dialect=d.name))


def sample_aggregate(plan: QueryPlan, d: EngineDialect) -> exp.Select:
    """The block rewrite of the plan's measures, all sample-and-aggregate ones (with `_units` when
    the plan selects partitions)."""
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
    h = salted_hash([col("_u")], d, [unit_type(plan)])
    block = exp.Mod(this=exp.Paren(this=exp.Add(this=exp.Paren(this=exp.Mod(this=h, expression=exp.Literal.number(k))),
                                                expression=exp.Literal.number(k))),
                    expression=exp.Literal.number(k))
    ranked = [col(n) for n in names] + [exp.alias_(block, "_blk", copy=False)]
    if plan.group_choice:
        order = []
        if plan.where is not None:
            order.append(exp.Ordered(this=exp.Sub(this=exp.Literal.number(1), expression=col("_hg"))))
        order.append(exp.Ordered(this=unit_keys_hash(plan, d)))
        order += [exp.Ordered(this=col(k_)) for k_ in keys]
        rank = exp.Window(this=exp.Anonymous(this="DENSE_RANK"), partition_by=[col("_u")],
                          order=exp.Order(expressions=order))
        ranked.append(exp.alias_(rank, "_rank", copy=False))
    tree = exp.Select(expressions=ranked, from_=exp.From(this=subquery(tree, "_rows")))
    # 3. one row per (group, block): the engine aggregate over the block's rows
    blocks = [col(k_) for k_ in keys] + [col("_blk")]
    nan = exp.Cast(this=exp.Literal.string("NaN"), to=data_type("DOUBLE", dialect=d.name))
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
            this=c, to=data_type(d.wide_int, dialect=d.name))), expression=d.wide(m.lo_int + m.hi_int))
        out.append(exp.alias_(exp.Sum(this=centered), m.name, copy=False))
    if plan.selection is not None:
        out.append(exp.alias_(exp.Sum(this=col("_n")), "_units", copy=False))
    args = {"expressions": out, "from_": exp.From(this=subquery(tree, "_blocks"))}
    if keys:
        args["group"] = exp.Group(expressions=[col(k_) for k_ in keys])
    return exp.Select(**args)


def combined(plan: QueryPlan, d: EngineDialect, general) -> exp.Select:
    """Sample-and-aggregate measures beside ordinary ones, in one SELECT:

        SELECT COALESCE(_m._k0, _s._k0) AS _k0, _m._v0, _s._v1, _m._v2, ..., _m._units
        FROM (<the general passes over the ordinary measures>) AS _m
          FULL JOIN (<the block rewrite of the sample-and-aggregate measures>) AS _s   -- LEFT JOIN
          ON COALESCE(_m._k0, '') = COALESCE(_s._k0, '') AND (_m._k0 IS NULL) = (_s._k0 IS NULL)
                                              -- with partition selection; no keys: CROSS JOIN

    general(subplan) is the general rewrite (rewrite.rewrite's passes) of a plan. Columns come
    back in the Session's order: keys, every measure in the plan's order, then `_units`.

    Why two rewrites joined on the keys, not one: the ordinary measures need one row per (unit,
    group) (per-unit pre-aggregation, then clamping), the block aggregates one row per (group,
    block) over the rows themselves; each part keeps its own tested rewrite, and the engine
    joins two per-group results (a few rows per group), so no row reaches Python and there is
    one engine round trip, one transaction, one charge. Joining the released rows in Python
    instead would need two engine queries (two transactions, two salts to reconcile).

    Privacy (sequential composition; the split of epsilon and delta is the analysis's, one share
    per measure and one for partition selection): each part is a function of the data whose
    sensitivity the analysis bounds on its own, whatever the other part does. The ordinary part
    bounds each unit to L0 groups by its group choice (group_choice.py), the block part by the
    same salted ranking of the unit's groups (passing rows first, then hash(unit, keys, salt);
    the two agree but for ties of the hash, and nothing below needs them to agree). So the
    vector of block sums, indexed by every possible key (0, the midpoint, for a key with no
    block value), moves by at most the sample-and-aggregate measure's L1/L2 sensitivity, and the
    ordinary measures and `_units` by theirs.
    * Public domains (and no keys): the FULL JOIN returns each group's value of each part
      whether or not the other part has the group, so every released value is exactly its own
      part's (a group missing from a part is 0 for its measures, as the Session fills in): the
      release is the noisy vectors, composed sequentially. (A LEFT JOIN would make a block value
      depend on whether the ordinary part formed the group, which other units' choices decide.)
    * Partition selection: the candidate groups are the ordinary part's (LEFT JOIN from it), the
      ones whose noisy `_units` passes the threshold are released, once for the query, exactly as
      without the block measures; a released group's block value is the block vector's entry
      for that key (NULL: 0). Releasing chosen entries of a noisy vector indexed by all keys is
      post-processing of it, so the query is (selection and ordinary measures) composed with
      (the block measures): epsilons (rho under zCDP) and deltas add.

    Totality: the join reads the keys as text (keys.py) with COALESCE and IS NULL, which cannot
    fail; equality of texts and of booleans, so PostgreSQL can hash a FULL JOIN (IS NOT DISTINCT
    FROM it cannot); the measures are passed through unchanged.
    """
    samples = tuple(m for m in plan.measures if isinstance(m, SampleAggregate))
    others = tuple(m for m in plan.measures if not isinstance(m, SampleAggregate))
    if not others:
        return sample_aggregate(plan, d)
    main = general(replace(plan, measures=others, units_only=False))
    blocks = sample_aggregate(replace(plan, measures=samples, selection=None), d)
    nk = len(plan.keys)
    m_, s_ = "_m", "_s"
    key = lambda i, t: exp.column(f"_k{i}", table=t)
    full = plan.selection is None
    cols: list[exp.Expression] = []
    for i in range(nk):
        value = exp.Coalesce(this=key(i, m_), expressions=[key(i, s_)]) if full else key(i, m_)
        cols.append(exp.alias_(value, f"_k{i}", copy=False))
    cols += [exp.alias_(exp.column(m.name, table=s_ if isinstance(m, SampleAggregate) else m_), m.name, copy=False)
             for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(exp.column("_units", table=m_), "_units", copy=False))
    sel = exp.Select(expressions=cols, from_=exp.From(this=subquery(main, m_)))
    if not nk:
        return sel.join(subquery(blocks, s_), join_type="CROSS", copy=False)
    empty = exp.Literal.string("")
    on = _and([exp.And(this=exp.EQ(this=exp.Coalesce(this=key(i, m_), expressions=[empty.copy()]),
                                   expression=exp.Coalesce(this=key(i, s_), expressions=[empty.copy()])),
                       expression=exp.EQ(this=exp.Paren(this=exp.Is(this=key(i, m_), expression=exp.Null())),
                                         expression=exp.Paren(this=exp.Is(this=key(i, s_), expression=exp.Null()))))
               for i in range(nk)])
    return sel.join(subquery(blocks, s_), on=on, join_type="FULL" if full else "LEFT", copy=False)
