"""Pass 8, quantiles: each quantile input's per-group histogram, bounded per unit, joined to the
result of the other passes by the group keys (dpsql.analysis.quantiles, dpsql.noise.exponential).

Per distinct input x with range [lo, hi] (one histogram serves every quantile of x), over the
rows pass's rows (policy filters, public domains, WHERE as the flag _h):

    _b  = clamp(FLOOR((CAST(clamp(x, lo, hi) AS R) - lo) / (hi - lo) * B), 0, B - 1)   -- NULL x: NULL
          (lo, hi: the declared or derived range, rounded outward to decimals: analysis.quantiles)
    per (unit, keys, bin):  _n = COUNT(_b) FILTER (WHERE _h)      HAVING _n > 0
    per (unit, keys):       the unit's bins in salted-hash order; a bin keeps
                            LEAST(_n, GREATEST(m - (rows before it), 0)) of its rows
                            [and DENSE_RANK of the unit's groups by salted hash <= L0]
    per (keys, bin):        _c = SUM(kept)
    per keys:               'bin:count,...' as text (STRING_AGG; Spark: concat_ws of collect_list)

Bounding (Wilson et al. 2020, as the other measures): after it each unit has at most
m = max_rows_per_unit counted rows in each group (the running sum over its bins caps the total
at m), in at most L0 groups (the same salted-hash rank as the group choice, when a unit could
reach more groups than the domain or L0 allows), so one unit moves a group's histogram by at most
m rows in at most L0 groups: the bound dpsql.noise.exponential's argument uses. Which rows are kept
depends only on the unit's own rows and the per-query secret salt, never on other units. When the
unit is unique (plan.bounded False) each unit has one row: no per-unit step is needed.

Totality: x is clamped in its own type first (NULL stays NULL; NaN compares above every number
and becomes hi; +-Infinity become the bounds), then cast to R (DOUBLE on DuckDB and Spark, NUMERIC
on PostgreSQL, EngineDialect.real), which holds every value of [lo, hi] (|lo|, |hi| <= 1e300,
dpsql.analysis.quantiles.MAX_BOUND). (v - lo) / (hi - lo) is in [0, 1] with a non-zero literal
divisor: no overflow on DuckDB (which checks DOUBLE overflow), no underflow error on PostgreSQL
(NUMERIC, not float8, whose division raises on underflow), nothing raises on Spark; FLOOR of a
number in [0, B] cast to BIGINT cannot overflow; the integer clamp keeps rounding at B inside.
Counts and bins are printed by CAST(BIGINT AS TEXT), total everywhere, so the text always loads
and dpsql.noise.exponential.parse_histogram reads it.

    SELECT _m._k0, _m._v0, _q0._qh0
    FROM (<the other passes' result>) AS _m LEFT JOIN (<histogram of x>) AS _q0
      ON _m._k0 IS NOT DISTINCT FROM _q0._k0
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.sql import clamp, number
from dpsql.dialects import EngineDialect, data_type
from dpsql.rewrite.group_choice import salted_hash, unit_keys_hash, unit_type
from dpsql.rewrite.keys import key_text
from dpsql.rewrite.per_unit import hit
from dpsql.rewrite.relation import filtered
from dpsql.rewrite.rows import _and, rows_select, subquery


def needs_salt(plan: QueryPlan) -> bool:
    """The histogram's (and COUNT(DISTINCT col)'s) per-unit choice orders by the salted hash when
    units are bounded."""
    return bool(plan.quantiles or plan.distincts) and plan.bounded


def histograms(plan: QueryPlan) -> dict[str, object]:
    """Histogram column -> its Quantile (the first one reading it: they share input and range)."""
    out: dict[str, object] = {}
    for q in plan.quantiles:
        out.setdefault(q.hist, q)
    return out


def _real(d: EngineDialect) -> exp.DataType:
    return data_type(d.real, dialect=d.name)


def bin_expression(q, d: EngineDialect) -> exp.Expression:
    """The bin of one row's value, in [0, B] (B only for hi: top_bin folds it in), NULL for NULL
    (module docstring: total)."""
    v = exp.Cast(this=clamp(q.input.copy(), q.lo, q.hi), to=_real(d))
    lo = exp.Cast(this=number(q.lo), to=_real(d))
    width = exp.Cast(this=number(q.hi - q.lo), to=_real(d))
    frac = exp.Div(this=exp.Paren(this=exp.Sub(this=v, expression=lo)), expression=width)
    scaled = exp.Mul(this=frac, expression=exp.Literal.number(q.bins))
    return exp.Cast(this=exp.Floor(this=scaled), to=data_type("BIGINT"))


def top_bin(raw: exp.Expression, bins: int) -> exp.Expression:
    """The bin in [0, B - 1]: hi's bin B is the last one, and a derived expression's rounding cannot
    leave the range either way (a CASE keeps NULL NULL; LEAST/GREATEST would skip it)."""
    return clamp(raw, 0, bins - 1)


def _count_text(d: EngineDialect, b: exp.Expression, c: exp.Expression) -> exp.Expression:
    text = lambda e: exp.Cast(this=e, to=data_type("TEXT"))
    item = exp.DPipe(this=exp.DPipe(this=text(b), expression=exp.Literal.string(":")), expression=text(c))
    return d.concat_texts(item)


def histogram_select(plan: QueryPlan, q, d: EngineDialect) -> exp.Select:
    keys = [exp.column(k.name) for k in plan.keys]
    rows = rows_select(plan, d)
    rows.append("expressions", exp.alias_(bin_expression(q, d), "_bin", copy=False))
    b, u, n = exp.column("_b"), exp.column("_u"), exp.column("_n")
    count = filtered(exp.Count(this=exp.column("_bin")), hit(plan))
    folded = top_bin(exp.column("_bin"), q.bins)
    per_bin = exp.Select(expressions=[u.copy(), *[k.copy() for k in keys], exp.alias_(folded, "_b", copy=False),
                                      exp.alias_(count, "_n", copy=False)],
                         from_=exp.From(this=subquery(rows, "_rows")),
                         group=exp.Group(expressions=[u.copy(), *[k.copy() for k in keys], folded.copy()]),
                         having=exp.Having(this=exp.GT(this=count.copy(), expression=exp.Literal.number(0))))
    m = plan.rows_per_unit
    if plan.bounded:
        order = exp.Order(expressions=[exp.Ordered(this=salted_hash([u.copy(), b.copy()], d, [unit_type(plan), "BIGINT"])),
                                       exp.Ordered(this=b.copy())])
        cum = exp.Window(this=exp.Sum(this=n.copy()), partition_by=[u.copy(), *[k.copy() for k in keys]],
                         order=order, spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                                                          end="CURRENT ROW"))
        cols = [*[k.copy() for k in keys], b.copy(), n.copy(), exp.alias_(cum, "_cum", copy=False)]
        if plan.group_choice:
            rank_order = [exp.Ordered(this=unit_keys_hash(plan, d)),
                          *[exp.Ordered(this=k.copy()) for k in keys]]
            rank = exp.Window(this=exp.Anonymous(this="DENSE_RANK"), partition_by=[u.copy()],
                              order=exp.Order(expressions=rank_order))
            cols.append(exp.alias_(rank, "_rank", copy=False))
        chosen = exp.Select(expressions=cols, from_=exp.From(this=subquery(per_bin, "_per_bin")))
        before = exp.Paren(this=exp.Sub(this=exp.column("_cum"), expression=n.copy()))
        kept = exp.Case(ifs=[exp.If(this=exp.LTE(this=exp.column("_cum"), expression=exp.Literal.number(m)),
                                    true=n.copy()),
                             exp.If(this=exp.LT(this=before, expression=exp.Literal.number(m)),
                                    true=exp.Sub(this=exp.Literal.number(m), expression=before.copy()))],
                        default=exp.Literal.number(0))
        where = [exp.GT(this=kept.copy(), expression=exp.Literal.number(0))]
        if plan.group_choice:
            where.append(exp.LTE(this=exp.column("_rank"), expression=exp.Literal.number(plan.l0)))
        source, total = subquery(chosen, "_chosen"), exp.Sum(this=kept)
    else:
        source, total, where = subquery(per_bin, "_per_bin"), exp.Sum(this=n.copy()), []
    per_group_bin = exp.Select(expressions=[*[k.copy() for k in keys], b.copy(),
                                            exp.alias_(exp.Cast(this=total, to=data_type("BIGINT")),
                                                       "_c", copy=False)],
                               from_=exp.From(this=source),
                               group=exp.Group(expressions=[*[k.copy() for k in keys], b.copy()]))
    if where:
        per_group_bin.set("where", exp.Where(this=_and(where)))
    args: dict = {"expressions": [key_text(i, k.copy()) for i, k in enumerate(keys)]
                  + [exp.alias_(_count_text(d, b.copy(), exp.column("_c")), q.hist, copy=False)],
                  "from_": exp.From(this=subquery(per_group_bin, "_bins"))}
    if keys:
        args["group"] = exp.Group(expressions=[k.copy() for k in keys])
    return exp.Select(**args)


def quantiles(tree: exp.Select, plan: QueryPlan, d: EngineDialect) -> exp.Select:
    if not plan.quantiles:
        return tree
    parts = [(f"_q{i}", histogram_select(plan, q, d), [name]) for i, (name, q) in enumerate(histograms(plan).items())]
    return attach(tree, plan, parts, bool(plan.measures or plan.keys or getattr(plan, "distincts", ())))


def attach(tree: exp.Select, plan: QueryPlan, parts: list, main: bool) -> exp.Select:
    """The result so far (if main: it has columns) with per-group subqueries joined on the text keys
    (NULL keys equal): SELECT _m.*, part columns. Without keys every part is one row: CROSS JOIN."""
    nk = len(plan.keys)
    sources = ([("_m", tree, None)] if main else []) + parts
    first_alias, first_tree, _ = sources[0]
    if main:
        cols: list[exp.Expression] = [exp.column(item.alias_or_name, table="_m") for item in tree.expressions]
    else:
        cols = [exp.column(f"_k{i}", table=first_alias) for i in range(nk)]
    cols += [exp.column(name, table=alias) for alias, _, names in parts for name in names]
    sel = exp.Select(expressions=cols, from_=exp.From(this=subquery(first_tree, first_alias)))
    for alias, t, _ in sources[1:]:
        if nk:
            on = _and([exp.NullSafeEQ(this=exp.column(f"_k{i}", table=first_alias),
                                      expression=exp.column(f"_k{i}", table=alias)) for i in range(nk)])
            sel = sel.join(subquery(t, alias), on=on, join_type="LEFT", copy=False)
        else:
            sel = sel.join(subquery(t, alias), join_type="CROSS", copy=False)
    return sel
