"""The planner: a statement and the connection's settings -> its plan (dpsql.analysis), with the
re-planning the settings ask for in one place: bounds = "auto" (the aggregates planned again at the
epsilon the bound choice leaves, and with the chosen bound once it is chosen), SET dpsql.rho (the
query planned at the largest epsilon whose noise costs at most rho) and SET dpsql.topk (a top-k
query as a selection). Plans are kept in a PlanCache, shared by a Backend's sessions.
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _replace
from fractions import Fraction

from sqlglot import exp as _exp

from dpsql import charge
from dpsql.analysis import auto_bounds
from dpsql.analysis import topk as topk_plan
from dpsql.analysis.analyze import PublicQuery, Schema, Settings, analyze
from dpsql.analysis.budget import MAX_PUBLIC_GROUPS
from dpsql.analysis.measures import Mechanism
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.plan import QueryPlan
from dpsql.errors import InternalError, QueryRejected
from dpsql.noise.mechanisms import epsilon_for_rho, laplace_noised
from dpsql.policy import Policy
from dpsql.release import mechanisms_for
from dpsql.rewrite.auto_bounds import count_sql

PLAN_CACHE = 128            # plans (and rewrites) a session keeps
SHARED_PLAN_CACHE = 1024    # plans (and rewrites) a Backend's sessions share


class PlanCache:
    """Recent plans and what is derived from each alone (its rewrite, its mechanisms: immutable),
    least recently used first out; thread-safe, so that one cache can serve all the sessions of a
    Backend (the proxy: one Session per client connection).

    A plan is a pure function of the text and parameters, the settings, the analyst's budget delta,
    the policy and the schema (plan_key holds each), so it may be shared. Keys also carry
    the analyst: a plan made for one analyst is never another's, so whether a query was planned
    before (visible in its latency when the [timing] defence is off) says nothing about what other
    analysts ask."""

    def __init__(self, size: int):
        self._size = size
        self._lock = threading.Lock()
        self._plans: collections.OrderedDict = collections.OrderedDict()       # key -> (schema, plan)
        self._derived: collections.OrderedDict = collections.OrderedDict()     # (id(plan), what) -> (plan, value)

    def get(self, key: tuple, schema: Schema):
        with self._lock:
            hit = self._plans.get(key)
            if hit is None or hit[0] is not schema:
                return None
            self._plans.move_to_end(key)
            return hit[1]

    def put(self, key: tuple, schema: Schema, plan) -> None:
        with self._lock:
            self._plans[key] = (schema, plan)
            while len(self._plans) > self._size:
                self._plans.popitem(last=False)

    def derived(self, plan, what: tuple):
        """What was kept for this very plan object under `what`, or None."""
        with self._lock:
            hit = self._derived.get((id(plan), what))
            return hit[1] if hit is not None and hit[0] is plan else None

    def put_derived(self, plan, what: tuple, value) -> None:
        with self._lock:
            self._derived[(id(plan), what)] = (plan, value)
            while len(self._derived) > 4 * self._size:
                self._derived.popitem(last=False)

    def memo(self, plan, what: tuple, make):
        """What was kept for this plan under `what`, else make() kept (a function of the plan alone)."""
        value = self.derived(plan, what)
        if value is None:
            value = make()
            self.put_derived(plan, what, value)
        return value

    def values(self):
        with self._lock:
            return list(self._plans.values())

    def __len__(self) -> int:
        return len(self._plans)


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a plan is a function of: the policy, the schema, the engine's dialect, the settings
    analysis reads (dpsql.settings: epsilon, delta, mechanism, rho, topk), the analyst's lifetime
    delta, and domain(table, column, what) reading a public table's values (public_domain)."""
    policy: Policy
    schema: Schema
    dialect: str
    epsilon: float
    delta: float
    mechanism: str
    rho: float | None
    topk: str
    budget_delta: float
    domain: Callable

    @classmethod
    def of(cls, settings, policy: Policy, schema: Schema, dialect: str, domain: Callable) -> Inputs:
        """The inputs from a connection's dpsql.settings.Settings."""
        s = settings
        return cls(policy, schema, dialect, s.epsilon, s.delta, s.mechanism, s.rho, s.topk, s.budget.delta, domain)

    def at(self, epsilon: float) -> Settings:
        """The analysis's settings at this epsilon."""
        return Settings(epsilon, self.delta, self.mechanism, self.budget_delta)


def plan_key(text: str, params: str, inputs: Inputs, analyst: str) -> tuple:
    """What a plan is a function of, besides the policy (fixed for a session and a Backend) and
    the schema (checked by identity): the text and parameters, every setting analysis reads
    (Settings, dpsql.rho, dpsql.topk) and the analyst (see PlanCache)."""
    i = inputs
    return (text, params, i.epsilon, i.delta, i.mechanism, i.rho, i.topk, i.budget_delta, analyst, id(i.schema))


def planned(cache: PlanCache, stmt: Statement, inputs: Inputs, analyst: str) -> QueryPlan | PublicQuery:
    """The statement's plan. Plans are a pure function of the text (with its parameters), the
    settings, the policy and the schema, so each session keeps its recent ones: a dashboard's
    repeated query skips parsing, analysis and rewriting. A plan whose keys read a public
    table's values is not kept (the table's rows may change)."""
    key = plan_key(stmt.text, stmt.params, inputs, analyst)
    hit = cache.get(key, inputs.schema)
    if hit is not None:
        return hit
    out = plan(stmt, inputs)
    if not (isinstance(out, QueryPlan) and (out.public_reads or any(k.domain_source for k in out.keys))):
        cache.put(key, inputs.schema, out)
    return out


def plan(stmt: Statement, inputs: Inputs) -> QueryPlan | PublicQuery:
    """The statement planned afresh at the connection's settings."""
    i = inputs
    planned = analyze(stmt.tree, i.policy, i.schema, i.at(i.epsilon), i.dialect, i.domain)
    auto = auto_bounds.find(planned, i.policy, i.epsilon) if isinstance(planned, QueryPlan) else None
    if i.topk != "off" and isinstance(planned, QueryPlan) and topk_plan.applies(planned):
        # a top-k as a selection (dpsql.analysis.topk), refused there (auto bounds too) when its
        # shape is not supported: never answered as a histogram instead
        planned = topk_plan.plan_topk(_replace(planned, auto=auto), i.epsilon, i.delta, i.mechanism)
    if auto is not None:    # bounds = "auto": the aggregates get the epsilon the bound choice leaves
        if i.rho is not None:
            raise QueryRejected("an auto-bounded column with dpsql.rho", "its bound choice is calibrated "
                                "in epsilon", "RESET dpsql.rho and SET dpsql.epsilon")
        rest = i.at(float(Fraction(i.epsilon) * (1 - auto_bounds.SHARE)))
        rest_plan = analyze(stmt.tree, i.policy, i.schema, rest, i.dialect, i.domain)
        return _replace(rest_plan, cost=planned.cost, auto=auto)
    if i.rho is not None and isinstance(planned, QueryPlan):
        planned = at_rho(stmt, planned, inputs)
    return planned


def analysis(stmt: Statement, settings: Settings, inputs: Inputs) -> QueryPlan | PublicQuery:
    """analyze, then (SET dpsql.topk = 'noisy_max') a top-k query as a selection
    (dpsql.analysis.topk): refused there when its shape is not supported, never answered as a
    histogram instead."""
    i = inputs
    planned = analyze(stmt.tree, i.policy, i.schema, settings, i.dialect, i.domain)
    if i.topk != "off" and isinstance(planned, QueryPlan) and topk_plan.applies(planned):
        planned = topk_plan.plan_topk(planned, settings.epsilon, settings.delta, settings.mechanism)
    return planned


def at_rho(stmt: Statement, plan: QueryPlan, inputs: Inputs) -> QueryPlan:
    """SET dpsql.rho: the same query planned at the largest epsilon whose noise costs at most rho.

    The analysis splits a query's epsilon over its parts in fixed shares (and its delta over the
    Gaussian parts and selection, independently of epsilon), so the plan at the current epsilon
    gives each part's share; mechanisms.epsilon_for_rho finds the epsilon, and the plan made at
    it is checked against rho with the mechanisms' exact rho (retried a little lower if float
    rounding put it above)."""
    ref = plan.cost.epsilon
    parts = ()
    for spec in plan.noise:
        if spec.mechanism is Mechanism.NOISY_MAX:   # k peels of the exponential mechanism
            parts += topk_plan.rho_parts(plan.topk.k, spec.epsilon / ref)
        else:
            parts += ((spec.mechanism, spec.epsilon / ref, spec.delta),)
    if plan.selection_noise is not None:
        parts += (("laplace", plan.selection_noise.epsilon / ref, 0.0),)
    target = inputs.rho
    for _ in range(4):
        eps = epsilon_for_rho(parts, target)
        planned = analysis(stmt, inputs.at(eps), inputs)
        got = charge.rho_of(planned, *mechanisms_for(planned))[0]
        if got <= Fraction(inputs.rho):
            return planned
        target *= 0.999999 * float(Fraction(inputs.rho) / got)
    raise InternalError("could not calibrate the query to dpsql.rho; nothing was released")


def auto_bound(plan: QueryPlan, inputs: Inputs, run: Callable[[str], list], rng) -> QueryPlan:
    """bounds = "auto" (dpsql.analysis.auto_bounds): one engine query (run(sql) -> rows) counts, per
    candidate bound, the units above it; AboveThreshold picks the bound; the query is planned again
    with it, at the epsilon left. Only the chosen bound leaves this function (in the plan)."""
    auto = plan.auto
    rows = run(count_sql(plan, auto, inputs.dialect))
    counts = rows[0] if rows else (0,) * len(auto.candidates)
    j = auto_bounds.above_threshold(counts, auto, rng, laplace_noised)
    bound = auto.candidates[j] if j is not None else auto.upper
    policy = auto_bounds.with_bound(inputs.policy, auto, bound)
    rest = inputs.at(float(Fraction(plan.cost.epsilon) * (1 - auto_bounds.SHARE)))
    final = analyze(classify(plan.text).tree, policy, inputs.schema, rest, inputs.dialect, inputs.domain)
    return _replace(final, cost=plan.cost, auto=_replace(auto, chosen=bound))


def public_domain(engine, expect: Callable) -> Callable:
    """domain(table, column, what="values"): a public table column's distinct values as text (a
    GROUP BY key's public domain): public data, read once per query; at most MAX_PUBLIC_GROUPS + 1
    of them. what="range": its (MIN, MAX) as text instead (arithmetic on a public column:
    grouping.Grouping._public_range). expect(refs, public): the schema facts the engine checks first."""
    def domain(table: str, column: str, what: str = "values") -> tuple:
        if what == "range":
            c = _exp.column(column)
            sel = _exp.select(*(_exp.Cast(this=f(this=c.copy()), to=_exp.DataType.build("TEXT"))
                                for f in (_exp.Min, _exp.Max))).from_(_exp.to_table(table))
            row = engine.run(sel.sql(engine.dialect), expect=expect([table], [table])).rows[0]
            return row[0], row[1]
        col = _exp.Cast(this=_exp.column(column), to=_exp.DataType.build("TEXT"))
        sel = _exp.select(col).distinct().from_(_exp.to_table(table)).limit(MAX_PUBLIC_GROUPS + 1)
        rows = engine.run(sel.sql(engine.dialect), expect=expect([table], [table]))
        if len(rows.rows) > MAX_PUBLIC_GROUPS:
            raise QueryRejected(f"GROUP BY {column}", f"the public table has more than {MAX_PUBLIC_GROUPS} values")
        return tuple(sorted((r[0] for r in rows.rows), key=lambda v: (v is None, v or "")))
    return domain
