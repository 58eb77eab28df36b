"""The charge: what the ledger records of a query and charges it, from its plan and the policy.

    charge_of(plan, policy, mechs, sel)     -> its cost (with the surcharge and rho), the surcharge,
                                               the subset series it joins
    charge_parts(plan, policy, mechs, sel)  -> that and the mechanisms' parameters the ledger keeps
    charge(ledger, analyst, budget, plan, parts, ...) -> the charge made (the ledger's Spending after it)
    rho_of(plan, mechs, sel)                -> the exact zCDP cost of its noise
    what_fits(err, plan, policy, settings)  -> a budget refusal with the setting that would fit
    outlook(charged, budget, totals, k)     -> EXPLAIN DP's budget advice
    explain_rows(plan, ...)                 -> EXPLAIN DP's rows of a private query
    audit(...)                              -> the audit log's entry for a query that selects people

The ledger (dpsql.ledger) records the charge; Session._answer has the engine call charge() inside the
query's own transaction, before the query runs.
"""
from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from dpsql import explain
from dpsql.analysis import topk as topk_plan
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.reconstruction import auto_cap, population_key
from dpsql.errors import BudgetExhausted, QueryRejected
from dpsql.ledger import AuditLog, ChargeParams, Cost, Ledger, Spending, SubsetCharge, accounting
from dpsql.ledger.answer_cache import answer_key
from dpsql.policy import Policy


def charge_of(plan: QueryPlan, policy: Policy, mechs, sel) -> tuple[Cost, float, SubsetCharge | None]:
    """What a query is charged: its cost, plus the policy's surcharge (a fraction of its epsilon,
    the same fraction of its rho) when it selects people by identity; and the subset series it
    joins, if any. The cost carries its zCDP part (rho of the mechanisms actually used, at least
    the policy's min_rho, and partition selection's delta), whichever accountant checks it."""
    rho, part = rho_of(plan, mechs, sel)
    floor = Fraction(policy.defaults.rho_floor)
    if plan.subset is None or not plan.subset.flagged:
        c = plan.cost
        return Cost(c.epsilon, c.delta, max(rho, floor), part), 0.0, None
    recon = policy.reconstruction
    surcharge = plan.cost.epsilon * recon.surcharge
    cap = recon.max_subset_queries if recon.max_subset_queries is not None else auto_cap
    tables = "+".join(sorted({t.name for t in plan.relation.policies})) if plan.relation else plan.table.name
    population = population_key(tables, tuple(m.label for m in plan.measures), plan.subset)
    rho = max(rho * (1 + Fraction(recon.surcharge)), floor)
    return (Cost(plan.cost.epsilon + surcharge, plan.cost.delta, rho, part), surcharge,
            SubsetCharge(population, plan.subset.named, cap))


def rho_of(plan: QueryPlan, mechs, sel) -> tuple[Fraction, float]:
    """The plan's zCDP cost before surcharge and floor: the exact rho of its mechanisms
    (dpsql.ledger.accounting claims 1-3), and partition selection's delta."""
    rho = sum((m.rho for m in mechs.values()), Fraction(0))
    if plan.auto is not None:       # the bound choice: eps_svt-DP, so eps_svt^2/2-zCDP
        rho += plan.auto.rho
    if sel is None:
        return rho, 0.0
    return rho + sel.rho, plan.selection.delta


def charge_parts(plan: QueryPlan, policy: Policy, mechs, sel
                 ) -> tuple[ChargeParams, Cost, float, SubsetCharge | None, Decimal]:
    """What the ledger records of a query and charges it: the mechanisms' parameters (the
    charge's params), the cost with its surcharge, the subset series and the rho rounded up.
    Functions of the plan and the policy alone, so the Session keeps them with the plan (a
    repeated query does not rebuild them); the params are frozen and encoded once (ChargeParams).
    mechs, sel: the plan's mechanisms (dpsql.release.mechanisms_for)."""
    params = {"values": [dict(mechs[m.name].params(), measure=m.label) for m in plan.measures if m.name in mechs]
              + [dict(mechs[q.name].params(), measure=q.label) for q in plan.quantiles]
              + [dict(mechs[dc.name].params(), measure=dc.label) for dc in plan.distincts]}
    if sel is not None:
        params["partition_selection"] = dict(sel.params(), threshold=plan.selection.threshold,
                                             delta=plan.selection.delta, l0=plan.selection.l0)
    if plan.topk is not None:
        params["topk"] = dict(mechs[topk_plan.TARGET].params(), measure=plan.topk.label,
                              order="desc" if plan.topk.desc else "asc", values_released=plan.topk.values)
    params["bounding"] = {"bounded": plan.bounded, "l0": plan.l0,
                          "max_rows_per_unit": plan.table.max_rows_per_unit if plan.bounded else 1}
    charged, surcharge, subset = charge_of(plan, policy, mechs, sel)
    if subset is not None:
        params["subset_selection"] = {"population": subset.population,
                                      "surcharge": policy.reconstruction.surcharge}
    parts = (ChargeParams(plan.mechanism, params), charged, surcharge, subset, accounting.decimal_up(charged.rho))
    return parts


def charge(ledger: Ledger, analyst: str, budget, plan: QueryPlan, parts: tuple, *, audit, refused) -> Spending:
    """Charge a query its charge_parts in the ledger and return the spending it left. A refusal of a
    query that selects people is audited; BudgetExhausted is raised as refused(err) (what_fits).
    A query that selects people is audited before anything runs: an unaudited answer is never
    released. audit(event, plan, **fields): dpsql.charge.audit."""
    params, charged, surcharge, subset, rho_q = parts
    b = budget
    try:
        spending = ledger.charge_with_spending(
            analyst, charged.epsilon, charged.delta, epsilon_total=b.epsilon, delta_total=b.delta,
            mechanism=plan.mechanism, params=params, query=plan.text, subset=subset, rho=rho_q,
            zcdp_delta=charged.zcdp_delta, accountant=b.accountant)[1]
    except (QueryRejected, BudgetExhausted) as err:
        if subset is not None:
            audit("subset_refused", plan, charged=charged, subset=subset, reason=err.sqlstate)
        if isinstance(err, BudgetExhausted):
            raise refused(err) from None
        raise
    if subset is not None:     # audited before anything runs: an unaudited answer is never released
        audit("subset_charged", plan, charged=charged, subset=subset, surcharge=surcharge)
    return spending


def what_fits(err: BudgetExhausted, plan: QueryPlan, policy: Policy, settings) -> BudgetExhausted:
    """The ledger's refusal with a hint the analyst can act on: how much is left and the
    setting at which this query would fit (its cost scales with the setting: linearly in
    epsilon and delta; SET dpsql.rho plans a query at a given rho), or that nothing fits.
    Computed from the budget, the settings (dpsql.settings) and the plan only."""
    left, need, what = err.remaining, err.needed, err.resource
    admin = "the budget itself is set by the policy; ask its administrator for more"
    if left is None or not need or what is None:
        return err

    def down(x: float) -> float:
        """x rounded down to 3 significant digits (so the suggestion does fit)."""
        if x <= 0:
            return 0.0
        step = 10 ** (math.floor(math.log10(x)) - 2)
        return math.floor(x / step) * step

    fix = None
    if what == "epsilon" and settings.rho is None:
        fit = down(settings.epsilon * left / need)
        if fit >= policy.defaults.min_epsilon:
            fix = f"SET dpsql.epsilon = {fit:g} (or lower) fits this query"
    elif what == "rho":
        flagged = plan.subset is not None and plan.subset.flagged
        fit = down(left / (1 + (policy.reconstruction.surcharge if flagged else 0)))
        if fit >= policy.defaults.rho_floor:
            fix = f"SET dpsql.rho = {fit:g} (or lower) fits this query"
    elif what == "delta" and settings.delta > 0:
        fit = down(settings.delta * left / need)
        if fit > 0:
            fix = f"SET dpsql.delta = {fit:g} (or lower) fits this query"
    shown = f"{left:.6g}"
    hint = (f"{what} {shown} is left: {fix}; {admin}" if fix else
            f"{what} {shown} is left, less than the smallest query may use; {admin}")
    return BudgetExhausted(str(err), hint, resource=what, remaining=left, needed=need)


def outlook(charged: Cost, budget, totals, plan_queries: int) -> tuple[str, dict, list]:
    """For EXPLAIN DP: the accountant in force, how many more queries like this one the
    remaining budget allows under it and under basic composition, and the planned series.
    budget: the analyst's (Policy.budget_for); totals: what the ledger holds spent (Ledger.totals)."""
    b, t = budget, totals
    rho = accounting.decimal_up(charged.rho)
    left = {"zcdp": accounting.zcdp_count(t.rho, t.zcdp_delta, rho, charged.zcdp_delta, b.epsilon, b.delta),
            "basic": accounting.basic_count(t.epsilon, t.delta, charged.epsilon, charged.delta,
                                            b.epsilon, b.delta)}
    plans = (accounting.plan_series(plan_queries, charged.epsilon, charged.delta, rho, charged.zcdp_delta,
                                    b.epsilon, b.delta) if plan_queries else [])
    return t.accountant or b.accountant, left, plans


# -- the reconstruction defence: surcharge, cap, cache, audit (dpsql.analysis.reconstruction, dpsql.ledger.answer_cache)
def answer_key_of(plan: QueryPlan, engine_name: str) -> str:
    """The answer cache's key of a plan on an engine (dpsql.ledger.answer_cache.answer_key)."""
    # a top-k selection answers the same text differently from the histogram: its own key
    mechanism = plan.mechanism + ("+noisy_max" if plan.topk is not None else "")
    # plan.text is the aggregate query; window functions and SELECT DISTINCT over its rows
    # (dpsql.analysis.windows) are outer queries of their own, and answers differ by them
    text = plan.text + "".join(f"\n-- over the released rows: {w.sql}" for w in plan.wraps if hasattr(w, "sql"))
    return answer_key(engine_name, text,
                      plan.cost.epsilon, plan.cost.delta, mechanism)


def audit(log: AuditLog, ledger: Ledger, analyst: str, event: str, plan: QueryPlan, *, charged: Cost,
          subset: SubsetCharge | None = None, **fields) -> None:
    """Write the audit log's entry for a query that selects people by identity (dpsql.ledger.audit)."""
    p = plan.subset
    if subset is not None:
        state = ledger.subset_state(analyst, subset)
        fields.update(population=subset.population, answered=state.answered, cap=state.cap,
                      named=state.named)
    log.write(event, analyst, query=plan.text,
              classification={"kinds": list(p.kinds), "columns": list(p.columns),
                              "selected": p.selected, "detail": p.describe()},
              epsilon=charged.epsilon, delta=charged.delta, **fields)


def explain_rows(plan: QueryPlan, sql: str, mechs, sel, policy: Policy, *, ledger: Ledger, analyst: str, budget,
                 plan_queries: int, cached: bool) -> list[tuple]:
    """EXPLAIN DP's rows of a private query (dpsql.explain.private_rows): what it would be charged,
    the subset series it would join, and what the budget left allows (outlook)."""
    charged, surcharge, subset = charge_of(plan, policy, mechs, sel)
    recon = policy.reconstruction
    series = ledger.subset_state(analyst, subset) if subset is not None else None
    raw = rho_of(plan, mechs, sel)[0] * (1 + Fraction(recon.surcharge) if surcharge else 1)
    rows = explain.private_rows(plan, sql, mechs, sel, charged=charged,
                                surcharge=surcharge, recon=recon, cached=cached, series=series,
                                floored=charged.rho > raw,
                                outlook=outlook(charged, budget, ledger.totals(analyst), plan_queries))
    if plan.auto is not None:
        a = plan.auto
        rows.insert(len(plan.noise), explain._pad(("auto_bound", f"upper clip of {a.column}", "above_threshold",
                                                   1.0, a.epsilon, 0.0, None, None, a.describe(), float(a.rho))))
    return rows
