"""Bound each privacy unit's contribution, in the engine.

Following Wilson et al. (PoPETs 2020), the bounded rewrite has two levels:

1. per (unit, group): one row per unit and group key, holding the unit's aggregates
   of clipped rows (aggregates.per_unit_aggregate),
   and, when a unit could reach more groups than max_groups_per_unit, a rank
   ROW_NUMBER() OVER (PARTITION BY unit ORDER BY hash(unit, keys, salt));
2. per group: only rows with rank <= max_groups_per_unit are summed, each first
   clamped to max_rows_per_unit times the per-row bound (aggregates.bounded_total).

So one unit touches at most L0 = max_groups_per_unit groups and moves each by at most
Linf: the bounds dpsql.analysis.sensitivity turns into sensitivities. The choice of
groups depends only on the unit's own rows and a salt: a fresh 63-bit secret from the
OS CSPRNG for every query, passed as a bound parameter (never the engine's random(),
never anything the analyst can set or replay), so the analyst cannot predict or steer
which groups are kept.

When the engine guarantees the unit is unique (PRIMARY KEY or UNIQUE), each unit has
one row, in one group: the per-unit level is skipped and rows are only clipped.
Rows whose unit is NULL are dropped (a NULL unit identifies nobody, and UNIQUE
allows many NULLs).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.plan import QueryPlan
from dpsql.rewrite import aggregates, clip, partitions

SALT = "salt"
_ARG_MIN = {"duckdb": "arg_min", "spark": "min_by"}    # the key with the smallest salted hash


def _salted_hash(unit: exp.Expression, keys: list[exp.Expression], dialect: str) -> exp.Expression:
    salt = exp.Placeholder(this=SALT)
    if dialect == "duckdb":
        return exp.Anonymous(this="hash", expressions=[unit, *keys, salt])
    if dialect == "postgres":
        # The row's text form, e.g. (17,CA,): one text per (unit, keys), NULL keys
        # distinct from '' (concat_ws would skip NULLs and join ('a', NULL) with (NULL, 'a')).
        text = exp.Cast(this=exp.Anonymous(this="ROW", expressions=[unit, *keys]), to=exp.DataType.build("TEXT"))
        return exp.Anonymous(this="hashtextextended", expressions=[text, salt])
    if dialect == "spark":
        return exp.Anonymous(this="xxhash64", expressions=[unit, *keys, salt])
    raise NotImplementedError(f"no salted hash for dialect {dialect}")


def base_filter(plan: QueryPlan, domain: bool = True) -> exp.Expression | None:
    """unit IS NOT NULL [AND key IN (domain) ...], or None: the filters that come from the policy.

    The analyst's WHERE is not here: it is evaluated per row inside the aggregation (hit), so
    the engine cannot skip work on it. The NULL test is left out when the engine guarantees the
    unit is NOT NULL."""
    conds: list[exp.Expression] = []
    if not plan.unit_not_null:
        conds.append(exp.Not(this=exp.Is(this=exp.column(plan.table.privacy_unit), expression=exp.Null())))
    if domain:
        conds.extend(partitions.domain_filter(plan))
    return _and(conds)


def _and(conds: list[exp.Expression]) -> exp.Expression | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = exp.And(this=out, expression=c)
    return out


def hit(plan: QueryPlan) -> exp.Expression | None:
    """The analyst's WHERE as a per-row condition for aggregate FILTER clauses (None: no WHERE).

    Why not WHERE (timing, see the README's threat model): a filter is something the engine
    may decide from statistics without reading rows. DuckDB's zone maps and its statistics
    propagation (which sees through CASE) skip or empty a scan once `income > X` is above
    every stored value, PostgreSQL picks an index scan from its histogram, Spark prunes
    Parquet row groups; each makes run time answer a question about the data (a binary search
    on timing finds one person's exact maximum). Inside `agg(...) FILTER (WHERE p)` the
    condition is evaluated on every row the policy's filters keep, whatever the statistics say,
    and the rows that fail it only count zero."""
    return None if plan.where is None else exp.Paren(this=plan.where.copy())


def filtered(agg: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
    """agg FILTER (WHERE cond) for the aggregate, or for each aggregate inside an expression of
    aggregates (a centered sum); agg itself when there is no condition."""
    if cond is None:
        return agg

    def wrap(node: exp.Expression) -> exp.Expression:
        return exp.Filter(this=node, expression=exp.Where(this=cond.copy()))
    if isinstance(agg, (exp.AggFunc, exp.Anonymous)):
        return wrap(agg)
    for node in list(agg.find_all(exp.AggFunc)):
        if node.find_ancestor(exp.AggFunc) is None:
            node.replace(wrap(node.copy()))
    return agg


def hits(plan: QueryPlan) -> exp.Expression | None:
    """COUNT(*) FILTER (WHERE the analyst's WHERE): a group's rows that pass, or None without WHERE."""
    cond = hit(plan)
    return None if cond is None else filtered(exp.Count(this=exp.Star()), cond)


def _table(plan: QueryPlan, dialect: str) -> exp.Table:
    """The protected table. On Spark a source that names files (a path: it has a `/` or ends
    in .parquet) is one quoted identifier: the engine registers the files as a temporary view
    of that name (dpsql.engines.spark, the same test)."""
    if dialect == "spark" and _is_path(plan.table_ref):
        return exp.Table(this=exp.to_identifier(plan.table_ref, quoted=True))
    return exp.to_table(plan.table_ref)


def _is_path(source: str) -> bool:
    return "/" in source or "\\" in source or source.lower().endswith(".parquet")


def _select(columns: list[exp.Expression], source: exp.Expression, where: exp.Expression | None,
            group: list[exp.Expression]) -> exp.Select:
    """A SELECT built in place (sqlglot's builder methods deep-copy at every step)."""
    args: dict = {"expressions": columns, "from_": exp.From(this=source)}
    if where is not None:
        args["where"] = exp.Where(this=where)
    if group:
        args["group"] = exp.Group(expressions=group)
    return exp.Select(**args)


def _rows(plan: QueryPlan, dialect: str, domain: bool) -> tuple[exp.Expression, exp.Expression | None, dict]:
    """The rows to aggregate: (source, WHERE, {measure name: column holding its scaled value}).

    PostgreSQL does not share common subexpressions, so the clamp-scale-cast of a non-integer
    value would run once per mention in the integer clamp around it (three times). There the
    filtered rows come from a subquery that computes it once per row; OFFSET 0 keeps the planner
    from inlining it back (10-30% faster on 1M people). Elsewhere: the table and the filter as they are."""
    scaled = [m for m in plan.measures if m.kind == "sum" and m.scale != 1]
    if dialect != "postgres" or not scaled:
        return _table(plan, dialect), base_filter(plan, domain), {}
    names = dict.fromkeys([plan.table.privacy_unit] + [k.column for k in plan.keys]
                          + [m.column for m in plan.measures if m.column is not None]
                          + ([c.name.lower() for c in plan.where.find_all(exp.Column)] if plan.where is not None else []))
    cols: list[exp.Expression] = [exp.column(c) for c in names]
    pre = {m.name: f"_s{i}" for i, m in enumerate(scaled)}
    cols += [exp.alias_(clip.scaled_cast(exp.column(m.column), m, dialect), pre[m.name], copy=False) for m in scaled]
    rows = _select(cols, _table(plan, dialect), base_filter(plan, domain), [])
    rows.set("offset", exp.Offset(expression=exp.Literal.number(0)))
    return exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("_rows"))), None, pre


def bounded(plan: QueryPlan, dialect: str) -> exp.Select:
    """The two-level rewrite with per-unit pre-aggregation.

    With a WHERE, every (unit, group) of the policy-filtered rows is formed, its measures and
    its _hits (rows passing WHERE) computed with FILTER; the rank puts the groups with hits
    first, so among them it is exactly the rank the filtered rows would give, and the outer
    level keeps only groups with hits. The bounds are those of the filtered rewrite."""
    unit = plan.table.privacy_unit
    rows = plan.table.max_rows_per_unit
    cond = hit(plan)
    source, where, pre = _rows(plan, dialect, domain=True)
    inner_cols = [exp.alias_(exp.column(k.column), k.name, copy=False) for k in plan.keys]
    inner_cols += [exp.alias_(filtered(aggregates.row_aggregate(m, dialect, pre.get(m.name)), cond), m.name, copy=False)
                   for m in plan.measures]
    if cond is not None:
        inner_cols.append(exp.alias_(hits(plan), "_hits", copy=False))
    if plan.group_choice:
        order = [exp.Ordered(this=_salted_hash(exp.column(unit), [exp.column(k.column) for k in plan.keys], dialect))]
        if cond is not None:     # groups with hits first
            order.insert(0, exp.Ordered(this=exp.Case(ifs=[exp.If(this=exp.GT(this=hits(plan), expression=exp.Literal.number(0)),
                                                                  true=exp.Literal.number(0))],
                                                      default=exp.Literal.number(1))))
        rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(unit)], order=exp.Order(expressions=order))
        inner_cols.append(exp.alias_(rank, "_rank", copy=False))
    inner = _select(inner_cols, source, where, [exp.column(unit)] + [exp.column(k.column) for k in plan.keys])
    outer_cols = [partitions.key_text(i, exp.column(k.name)) for i, k in enumerate(plan.keys)]
    outer_cols += [exp.alias_(aggregates.bounded_total(m, rows, dialect), m.name, copy=False) for m in plan.measures]
    outer_cols += partitions.units_column(plan)
    keep = []
    if plan.group_choice:
        keep.append(exp.LTE(this=exp.column("_rank"), expression=exp.Literal.number(plan.table.max_groups_per_unit)))
    if cond is not None:
        keep.append(exp.GT(this=exp.column("_hits"), expression=exp.Literal.number(0)))
    per_unit = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_per_unit")))
    return _select(outer_cols, per_unit, _and(keep), [exp.column(k.name) for k in plan.keys])


def units_only(plan: QueryPlan, dialect: str) -> exp.Select | None:
    """Every measure is COUNT(*) and max_rows_per_unit = 1: each kept unit adds exactly 1.

    Without a group choice, a group's bounded count is its number of distinct units (with a
    WHERE: of units with a row passing it; groups with none are dropped by HAVING, as the
    filtered rewrite never forms them).
    With one group per unit on DuckDB or Spark, the unit's group is the one with the smallest
    salted hash, found by ARG_MIN (Spark: MIN_BY) in a single per-unit aggregation (the same bound as
    the ranked rewrite: one group per unit, 1 in it); on PostgreSQL by DISTINCT ON (unit) in the
    order of that hash. Else None: use the general path.
    """
    unit = exp.column(plan.table.privacy_unit)
    cond = hit(plan)
    count_units = filtered(exp.Count(this=exp.Distinct(expressions=[unit])), cond)
    if not plan.group_choice:
        cols = [partitions.key_text(i, exp.column(k.column)) for i, k in enumerate(plan.keys)]
        cols += [exp.alias_(count_units.copy(), m.name, copy=False) for m in plan.measures]
        if plan.selection is not None:
            cols.append(exp.alias_(count_units.copy(), "_units", copy=False))
        sel = _select(cols, _table(plan, dialect), base_filter(plan), [exp.column(k.column) for k in plan.keys])
        if cond is not None and plan.keys and plan.selection is not None:
            sel.set("having", exp.Having(this=exp.GT(this=count_units.copy(), expression=exp.Literal.number(0))))
        return sel
    if plan.table.max_groups_per_unit != 1:
        return None
    if dialect == "postgres":
        return _distinct_on(plan)
    if dialect not in _ARG_MIN or len(plan.keys) != 1:
        return None
    key = exp.column(plan.keys[0].column)
    chosen = exp.Anonymous(this=_ARG_MIN[dialect], expressions=[key, _salted_hash(exp.column(plan.table.privacy_unit),
                                                                          [key.copy()], dialect)])
    inner_cols = [exp.alias_(filtered(chosen, cond), plan.keys[0].name, copy=False)]
    if cond is not None:
        inner_cols.append(exp.alias_(hits(plan), "_hits", copy=False))
    inner = _select(inner_cols, _table(plan, dialect), base_filter(plan), [unit])
    cols = [partitions.key_text(0, exp.column(plan.keys[0].name))]
    cols += [exp.alias_(exp.Count(this=exp.Star()), m.name, copy=False) for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(exp.Count(this=exp.Star()), "_units", copy=False))
    per_unit = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_per_unit")))
    keep = None if cond is None else exp.GT(this=exp.column("_hits"), expression=exp.Literal.number(0))
    return _select(cols, per_unit, keep, [exp.column(plan.keys[0].name)])


def _distinct_on(plan: QueryPlan) -> exp.Select:
    """PostgreSQL's form of the one-group choice: DISTINCT ON (unit) keeps each unit's first row in
    the order (unit, salted hash), i.e. its group with the smallest salted hash, in one sort; then
    each group counts its units (each adds exactly 1). With a WHERE, rows passing it sort first
    within a unit (_hit), and units whose first row does not pass have none and are dropped."""
    unit = exp.column(plan.table.privacy_unit)
    keys = [exp.column(k.column) for k in plan.keys]
    cond = hit(plan)
    order = [exp.Ordered(this=unit.copy())]
    cols = [exp.alias_(k, g.name, copy=False) for k, g in zip(keys, plan.keys)]
    if cond is not None:
        cols.append(exp.alias_(exp.Case(ifs=[exp.If(this=cond, true=exp.Literal.number(1))], default=exp.Literal.number(0)),
                               "_hit", copy=False))
        order.append(exp.Ordered(this=exp.column("_hit"), desc=True))
    order.append(exp.Ordered(this=_salted_hash(unit.copy(), [k.copy() for k in keys], "postgres")))
    inner = _select(cols, _table(plan, "postgres"), base_filter(plan), [])
    inner.set("distinct", exp.Distinct(on=exp.Tuple(expressions=[unit])))
    inner.set("order", exp.Order(expressions=order))
    cols = [partitions.key_text(i, exp.column(k.name)) for i, k in enumerate(plan.keys)]
    cols += [exp.alias_(exp.Count(this=exp.Star()), m.name, copy=False) for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(exp.Count(this=exp.Star()), "_units", copy=False))
    per_unit = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_per_unit")))
    keep = None if cond is None else exp.EQ(this=exp.column("_hit"), expression=exp.Literal.number(1))
    return _select(cols, per_unit, keep, [exp.column(k.name) for k in plan.keys])


def unique_unit(plan: QueryPlan, dialect: str) -> exp.Select:
    """One row per unit (engine-guaranteed): clip rows and aggregate per group, the analyst's
    WHERE in FILTER clauses; with partition selection, groups without a passing row are dropped
    (the filtered rewrite never forms them)."""
    cond = hit(plan)
    cols = [partitions.key_text(i, exp.column(k.column)) for i, k in enumerate(plan.keys)]
    cols += [exp.alias_(filtered(aggregates.row_aggregate(m, dialect), cond), m.name, copy=False) for m in plan.measures]
    if plan.selection is not None:
        cols.append(exp.alias_(filtered(exp.Count(this=exp.Star()), cond), "_units", copy=False))
    # With no group choice, filtering groups after aggregation equals filtering rows
    # before it, and engines do the former much faster (an IN list over every row).
    # (No rows subquery here on PostgreSQL: its OFFSET 0 fence would cost the parallel scan.)
    sel = _select(cols, _table(plan, dialect), base_filter(plan, domain=False), [exp.column(k.column) for k in plan.keys])
    keep = partitions.domain_filter(plan)
    if cond is not None and plan.keys and plan.selection is not None:
        keep.append(exp.GT(this=hits(plan), expression=exp.Literal.number(0)))
    if keep:
        sel.set("having", exp.Having(this=partitions.opaque(keep)))
    return sel
