"""EXPLAIN DP: the rows that say how a query would be answered and what it would cost.

Pure formatting of what the Session computed (the plan, its mechanisms, the charge with any
reconstruction surcharge, the subset series, whether an identical answer is cached); nothing
here runs or charges anything.
"""
from __future__ import annotations

from typing import Any

from dpsql.analysis.plan import QueryPlan
from dpsql.cost import Cost

COLUMNS = ("item", "aggregate", "mechanism", "sensitivity", "epsilon", "delta", "noise_scale",
           "ci95_half_width", "detail")
TYPES = ("string", "string", "string", "number", "number", "number", "number", "number", "string")


def private_rows(plan: QueryPlan, sql: str, mechs: dict, sel: Any, *, charged: Cost, surcharge: float,
                 recon: Any, cached: bool, series: Any) -> list[tuple]:
    """One row per noisy value, then partition selection, surcharge, total charge, cache, bounding,
    subset classification and series, and the rewritten SQL."""
    rows = []
    for m, spec in zip(plan.measures, plan.noise):
        mech = mechs[m.name]
        rows.append(("value", m.label, mech.name, spec.sensitivity, spec.epsilon, spec.delta,
                     mech.scale, mech.half_width(),
                     f"{'L1' if spec.mechanism == 'laplace' else 'L2'} sensitivity = "
                     f"{plan.l0} group(s) per unit x {spec.linf:g} per group"))
    if sel is not None:
        s = plan.selection
        rows.append(("partition_selection", "distinct units per group", "laplace", float(s.l0), s.epsilon,
                     s.delta, sel.scale, sel.half_width(),
                     f"a group is released only if its noisy unit count exceeds {s.threshold:.2f}"))
    outputs = ", ".join(f"{o.name} = {o.text}" for o in plan.outputs)
    split = len(plan.noise) + (1 if sel is not None else 0)
    if surcharge:
        rows.append(("surcharge", "selects people by identity", None, None, surcharge, 0.0, None, None,
                     f"[reconstruction] surcharge {recon.surcharge:g} x epsilon {plan.cost.epsilon:g}: "
                     "charged, adds no noise"))
    rows.append(("charge", "total", plan.mechanism, None, charged.epsilon, charged.delta, None, None,
                 f"epsilon split evenly over {split} noisy part(s); outputs: {outputs}"))
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
    return rows


def public_rows(sql: str) -> list[tuple]:
    return [("public", None, None, None, 0.0, 0.0, None, None, "reads no protected table: passed through, "
             "charges nothing"), ("rewritten_sql", None, None, None, None, None, None, None, sql)]


def _bounding(plan: QueryPlan) -> str:
    t = plan.table
    if plan.bounded:
        how = (f"per-unit pre-aggregation on {t.privacy_unit}: at most {t.max_rows_per_unit} row(s) per group"
               + (f", at most {t.max_groups_per_unit} group(s) per unit chosen by a salted hash"
                  if plan.group_choice else "") + "; values clipped to declared bounds")
    else:
        how = f"{t.privacy_unit} is unique in the engine (PRIMARY KEY/UNIQUE): rows clipped only"
    if plan.keys:
        how += "; groups: " + ", ".join(
            f"{k.column} ({'public domain of ' + str(len(k.domain)) if k.domain else 'partition selection'})"
            for k in plan.keys)
    return how
