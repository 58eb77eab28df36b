"""EXPLAIN DP: the rows that say how a query would be answered and what it would cost.

Pure formatting of what the Session computed (the plan, its mechanisms, the charge with any
reconstruction surcharge and its zCDP cost, the subset series, whether an identical answer is
cached, how many more such queries the budget allows under each accountant, and a planned series
of k such queries under basic, advanced and zCDP composition); nothing here runs or charges
anything.

Three forms of the same facts:

- ``EXPLAIN DP query``: two columns, ``fact`` and ``value``, one row per fact (as psql shows a
  PostgreSQL EXPLAIN, one line per row): a long value continues on the following rows with an
  empty ``fact``, and the rewritten SQL is pretty-printed over several rows.
- ``EXPLAIN DP (SQL) query``: only the rewritten SQL, pretty-printed, one line per row.
- ``EXPLAIN DP (WIDE) query``: one row per part with every number in its own column (COLUMNS), for
  programs: ``rho`` is each part's zCDP cost (the charge row: the total charged), ``queries`` a
  number of queries (budget_left and plan rows).
"""
from __future__ import annotations

import textwrap
from typing import Any

import sqlglot

from dpsql.analysis.measures import SampleAggregate
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.topk import TARGET
from dpsql.ledger.accounting import Cost, Plan

COLUMNS = ("item", "aggregate", "mechanism", "sensitivity", "epsilon", "delta", "noise_scale",
           "ci95_half_width", "detail", "rho", "queries")
TYPES = ("string", "string", "string", "number", "number", "number", "number", "number", "string",
         "number", "number")

FACT_COLUMNS = ("fact", "value")
SQL_COLUMNS = ("rewritten_sql",)
WIDTH = 100          # a fact's value longer than this continues on the next rows


def columns(form: str) -> tuple[str, ...]:
    return {"wide": COLUMNS, "sql": SQL_COLUMNS}.get(form, FACT_COLUMNS)


def types(form: str) -> tuple[str, ...]:
    return TYPES if form == "wide" else ("string",) * len(columns(form))


def pretty_sql(sql: str, dialect: str | None = None) -> list[str]:
    """The rewritten SQL over several lines (sqlglot's pretty printer; as it is if that fails)."""
    try:
        text = sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except Exception:      # noqa: BLE001 - formatting only: fall back to the text as it is
        text = sql
    return [line.rstrip() for line in text.splitlines() if line.strip()] or [sql]


def shaped(rows: list[tuple], form: str, dialect: str | None = None) -> list[tuple]:
    """The wide rows (private_rows/public_rows) in the form asked for."""
    if form == "wide":
        return rows
    sql = next((r[8] for r in rows if r[0] == "rewritten_sql"), "")
    lines = pretty_sql(sql, dialect)
    if form == "sql":
        return [(line,) for line in lines]
    out = []
    for r in rows:
        if r[0] == "rewritten_sql":
            out += [("rewritten_sql" if i == 0 else "", line) for i, line in enumerate(lines)]
            continue
        fact = r[0] if r[1] is None else f"{r[0]}: {r[1]}"
        parts = _numbers(r)
        text = ", ".join(parts)
        if r[8]:
            text = f"{text}; {r[8]}" if text else r[8]
        wrapped = textwrap.wrap(text, WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
        out += [(fact if i == 0 else "", line) for i, line in enumerate(wrapped)]
    return out


def _numbers(r: tuple) -> list[str]:
    """A wide row's numbers, named: mechanism, sensitivity, epsilon, delta, noise scale, 95% width, rho."""
    _, _, mech, sens, eps, delta, scale, ci, _, rho, _ = r
    out = [mech] if mech else []
    for name, v in (("sensitivity", sens), ("epsilon", eps), ("delta", delta), ("noise scale", scale),
                    ("95% half-width", ci), ("rho", rho)):
        if v is not None and not (name == "delta" and v == 0 and r[0] != "charge"):
            out.append(f"{name} {v:.6g}")
    return out


_RULES = {"basic": "basic composition (epsilons and deltas add)",
          "advanced": "advanced composition (Dwork, Rothblum & Vadhan 2010)",
          "zcdp": "zCDP (rho adds; Canonne, Kamath & Steinke 2020 conversion)"}


def private_rows(plan: QueryPlan, sql: str, mechs: dict, sel: Any, *, charged: Cost, surcharge: float,
                 recon: Any, cached: bool, series: Any, floored: bool = False,
                 outlook: tuple[str, dict, list] | None = None) -> list[tuple]:
    """One row per noisy value, then partition selection, surcharge, rho floor, total charge, what
    the budget leaves, a planned series, cache, bounding, subset classification and series, and
    the rewritten SQL."""
    rows = []
    specs = {spec.target: spec for spec in plan.noise}
    top = plan.topk
    rows += _topk_rows(plan, mechs, specs)
    for m in plan.measures:
        if m.name not in specs:     # top-k scores only, value not released
            continue
        spec, mech = specs[m.name], mechs[m.name]
        groups = (f"min(k = {top.k}, {plan.l0} group(s) per unit) of the selected keys" if top is not None
                  else f"{plan.l0} group(s) per unit")
        rows.append(("value", m.label, mech.name, spec.sensitivity, spec.epsilon, spec.delta,
                     mech.scale, mech.half_width(),
                     (f"measured afresh on the {top.k} selected keys only; " if top is not None else "")
                     + f"{'L1' if spec.mechanism.l1 else 'L2'} sensitivity = "
                     f"{groups} x {spec.linf:g} per group"
                     + (f"; {m.derived}" if isinstance(m, SampleAggregate)
                        else f"; the expression's derived {m.derived}" if m.derived else ""), float(mech.rho)))
    rows += _quantile_rows(plan, mechs)
    if sel is not None:
        s = plan.selection
        rows.append(("partition_selection", "distinct units per group", "laplace", float(s.l0), s.epsilon,
                     s.delta, sel.scale, sel.half_width(),
                     f"a group is released only if its noisy unit count exceeds {s.threshold:.2f} "
                     f"(its delta is charged outside zCDP)", float(sel.rho)))
    outputs = ", ".join(f"{o.name} = {o.text}" for o in plan.outputs)
    split = len(plan.noise) + (1 if sel is not None else 0)
    how = (f"epsilon split evenly over {split} noisy part(s)" if top is None or split == 1 else
           f"epsilon split {top.epsilon:g} to the top-{top.k} selection, "
           f"{charged.epsilon - surcharge - top.epsilon:g} to the values of the selected keys")
    if surcharge:
        rows.append(("surcharge", "selects people by identity", None, None, surcharge, 0.0, None, None,
                     f"[reconstruction] surcharge {recon.surcharge:g} x epsilon {plan.cost.epsilon:g} "
                     f"(and x rho): charged, adds no noise"))
    if floored:
        rows.append(("rho_floor", "min_rho", None, None, None, None, None, None,
                     "the policy charges every query at least min_rho (it bounds how many answers a budget "
                     "buys): charged, adds no noise", float(charged.rho)))
    rows.append(("charge", "total", plan.mechanism, None, charged.epsilon, charged.delta, None, None,
                 f"{how}; outputs: {outputs}; "
                 f"zCDP cost rho {float(charged.rho):.6g}"
                 + (f" and delta {charged.zcdp_delta:g} outside zCDP" if charged.zcdp_delta else ""),
                 float(charged.rho)))
    if outlook is not None:
        rows += _outlook_rows(*outlook)
    if cached:
        rows.append(("cache", "identical earlier query", None, None, 0.0, 0.0, None, None,
                     "running it again repeats the answer already released, free of charge"))
    rows.append(("bounding", None, None, None, None, None, None, None, _bounding(plan)))
    if plan.subset is not None:
        rows.append(("subset_selection", "flagged" if plan.subset.flagged else "none", None, None, None, None,
                     None, None, plan.subset.describe()))
    if series is not None:
        left = max(series.cap - series.answered, 0)
        if recon.max_subset_queries is not None:
            why = "max_subset_queries"
        elif series.named is not None:
            why = f"cap derived from {series.named} identity values named"
        else:
            why = "cap for a series that names no values"
        rows.append(("subset_series", f"{series.answered} of {series.cap} answered", None, None, None, None, None,
                     None, f"population {series.population}: {left} more subset "
                           f"quer{'y' if left == 1 else 'ies'} allowed ({why})"))
    rows.append(("rewritten_sql", None, None, None, None, None, None, None, sql))
    return [_pad(r) for r in rows]


def _topk_rows(plan: QueryPlan, mechs: dict, specs: dict) -> list[tuple]:
    """SET dpsql.topk = 'noisy_max' (dpsql.noise.topk): the selection's row: k, the score's per-group
    sensitivity (not times the groups per unit), epsilon over the k peels, the temperature, the 95%
    score gap and rho."""
    t = plan.topk
    if t is None:
        return []
    mech, spec = mechs[TARGET], specs[TARGET]
    return [("topk", t.label, mech.name, float(t.sensitivity), spec.epsilon, 0.0, mech.scale, mech.half_width(),
             f"report-noisy-max: {t.describe()}; rho = epsilon^2/(8k); 95%: each chosen key's score is within "
             f"{mech.half_width():.4g} of the best left at its peel; keys are released without a half-width"
             + ("" if t.values else "; the aggregate's value is not released"), float(mech.rho))]


def _quantile_rows(plan: QueryPlan, mechs: dict) -> list[tuple]:
    """One row per COUNT(DISTINCT col) of a non-unit column, then one per quantile
    (dpsql.noise.exponential): the exponential mechanism's rank sensitivity,
    epsilon, temperature and 95% rank error (its 'half-width' is in rows of the group, not value units)."""
    specs = {spec.target: spec for spec in plan.noise}
    out = []
    for dc in plan.distincts:
        mech, spec = mechs[dc.name], specs[dc.name]
        out.append(("value", dc.label, mech.name, spec.sensitivity, spec.epsilon, spec.delta, mech.scale,
                    mech.half_width(), f"{'L1' if spec.mechanism.l1 else 'L2'} sensitivity = {plan.l0} "
                    f"group(s) per unit x {spec.linf:g} distinct value(s) per unit and group (each unit's values "
                    f"are bounded first)", float(mech.rho)))
    for q in plan.quantiles:
        mech, spec = mechs[q.name], specs[q.name]
        width = float((q.hi - q.lo) / q.bins)
        out.append(("value", q.label, mech.name, spec.linf, spec.epsilon, 0.0, mech.scale, mech.half_width(),
                    f"exponential mechanism over {q.bins} bins of [{float(q.lo):g}, {float(q.hi):g}] (width {width:g}); "
                    f"rank sensitivity {spec.linf:g} row(s) per group, epsilon {float(mech.eps_group):g} per group over "
                    f"{plan.l0} group(s) per unit; 95%: the value's rank is within {mech.half_width():.4g} rows of "
                    f"q*n, the value within one bin of such a rank's; a DP estimate, not an exact order statistic"
                    + (f"; the expression's derived {q.derived}" if q.derived else ""), float(mech.rho)))
    return out


def public_rows(sql: str) -> list[tuple]:
    return [_pad(("public", None, None, None, 0.0, 0.0, None, None, "reads no protected table: passed through, "
                  "charges nothing", 0.0)), _pad(("rewritten_sql", None, None, None, None, None, None, None, sql))]


def _pad(row: tuple) -> tuple:
    return row + (None,) * (len(COLUMNS) - len(row))


def _count(n: int | None) -> str:
    return "unlimited" if n is None else f"{n:,}"


def _outlook_rows(accountant: str, left: dict, plans: list[Plan]) -> list[tuple]:
    """How many more queries like this the remaining budget allows under the accountant in force and
    under the other; then, for SET dpsql.plan_queries = k, k such queries from a fresh budget."""
    rows = []
    for rule in (accountant, "basic" if accountant == "zcdp" else "zcdp"):
        n = left[rule]
        how = "in force" if rule == accountant else "for comparison: the same spending under this rule"
        rows.append(("budget_left", rule, None, None, None, None, None, None,
                     f"{_count(n)} more quer{'y' if n == 1 else 'ies'} like this fit{'s' if n == 1 else ''} the "
                     "remaining budget "
                     f"under {_RULES[rule]} ({how})", None, None if n is None else float(n)))
    for p in plans:
        verdict = "fits the budget" if p.fits else "exceeds the budget"
        rows.append(("plan", p.rule, None, None, p.epsilon, p.delta, None, None,
                     f"{p.queries:,} such queries from a fresh budget: epsilon {p.epsilon:.4g}, delta {p.delta:g} "
                     f"under {_RULES[p.rule]}; {verdict}, which buys {_count(p.most)} of them"
                     + ("; advanced composition is a comparison only, never charged" if p.rule == "advanced" else ""),
                     None, float(p.queries)))
    return rows


def _bounding(plan: QueryPlan) -> str:
    rel = plan.relation
    unit = f"{rel.unit[0]}.{rel.unit[1]}" if rel is not None and rel.unit else plan.table.privacy_unit
    source = _relation(plan)
    if plan.bounded:
        how = (f"per-unit pre-aggregation on {unit} over {source}: at most {plan.rows_per_unit} row(s) per "
               "group" + (f", at most {plan.l0} group(s) per unit chosen by a salted hash" if plan.group_choice
                          else "") + "; values clipped to declared bounds")
    elif rel is not None and any(i.per_unit is not None for i in rel.instances):
        how = f"one row per unit ({unit}) by construction: {source}; rows clipped only"
    else:
        how = f"{unit} is unique in the engine (PRIMARY KEY/UNIQUE) in {source}: rows clipped only"
    if plan.keys:
        how += "; groups: " + ", ".join(
            f"{k.column} (" + ("the public table's " + str(len(k.domain)) + " values" if k.domain_source
                               else f"derived {k.derived}" if k.derived and k.domain is not None
                               else "public domain of " + str(len(k.domain)) if k.domain is not None
                               else "partition selection") + ")"
            for k in plan.keys)
    return how


def _relation(plan: QueryPlan) -> str:
    """The relation bounded, for people: the tables and how they are joined."""
    rel = plan.relation
    if rel is None:
        return plan.table.name

    def name(i) -> str:
        if i.per_unit is not None:
            inner = i.per_unit.relation.first
            return f"a per-unit subquery {i.alias} over {inner.policy.name if inner.policy else inner.ref}"
        what = i.policy.name if i.policy is not None else i.ref
        return what + ("" if i.alias == what else f" {i.alias}") + (" (public)" if i.kind == "public" else "")
    out = name(rel.first)
    for j in rel.joins:
        via = " (dpsql's join resolving a link)" if j.instance.implicit else ""
        out += f" {j.kind.upper()} JOIN {name(j.instance)} ON {j.on.sql('postgres')}{via}"
    if rel.semi:
        out += f" with {len(rel.semi)} semi-join(s) on the unit"
    return out
