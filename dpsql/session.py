"""Session: the one pipeline every front end shares.

    text -> parse -> analyze (QueryPlan: sensitivity, mechanism, cost)
         -> rewrite                       [EXPLAIN DP stops here, charges nothing]
         -> ledger.charge                 [BudgetExhausted: nothing runs, nothing released]
         -> engine.run (all work in the engine; one row per group)
         -> noise (partition threshold, values, accuracy) -> postprocess -> Result

A Session holds only the connection-level settings (epsilon, delta, mechanism for
the next queries) and its handles; everything about one query lives in its plan.
Nothing an analyst can SET changes the analyst, the budget or what was spent.
"""
from __future__ import annotations

import collections
import datetime as _dt
import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Self

from dpsql import explain, postprocess
from dpsql.analysis import auto_bounds
from dpsql.analysis import topk as topk_plan
from dpsql.analysis.analyze import (
    PublicQuery,
    Schema,
    Settings,
    analyze,
    check_policy_types,
    family,
)
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.measures import Count, Mechanism, SampleAggregate
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.reconstruction import auto_cap, population_key
from dpsql.engines import Engine, TableFacts, open_engine, path_sources
from dpsql.errors import (
    BudgetExhausted,
    Error,
    InterfaceError,
    InternalError,
    InvalidSetting,
    PolicyError,
    QueryCanceled,
    QueryRejected,
    SchemaChanged,
)
from dpsql.ledger import AuditLog, ChargeParams, Cost, Ledger, Spending, SubsetCharge, accounting
from dpsql.ledger.answer_cache import answer_key, decode, encode
from dpsql.noise import SecureRng, make_mechanism, vector
from dpsql.noise.exponential import QuantileEM
from dpsql.noise.mechanisms import epsilon_for_rho
from dpsql.noise.topk import NoisyTopK
from dpsql.policy import MECHANISMS, Policy, load_policy
from dpsql.rewrite import SALT, to_sql
from dpsql.rewrite.quantiles import histograms as quantile_histograms
from dpsql.rewrite.quantiles import needs_salt
from dpsql.rewrite.auto_bounds import count_sql

log = logging.getLogger("dpsql")

_PLAN_CACHE = 128       # plans (and rewrites) a session keeps
_SHARED_PLAN_CACHE = 1024   # plans (and rewrites) a Backend's sessions share
_ANALYST = re.compile(r"^[\w.@+-]{1,128}$")


class PlanCache:
    """Recent plans and what is derived from each alone (its rewrite, its mechanisms: immutable),
    least recently used first out; thread-safe, so that one cache can serve all the sessions of a
    Backend (the proxy: one Session per client connection).

    A plan is a pure function of the text and parameters, the settings, the analyst's budget delta,
    the policy and the schema (Session._plan_key holds each), so it may be shared. Keys also carry
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

    def values(self):
        with self._lock:
            return list(self._plans.values())

    def __len__(self) -> int:
        return len(self._plans)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How noisy one released column is.

    noise_scale: the mechanism's scale (Laplace b or Gaussian sigma) for a column that
    is one noisy aggregate; None for derived columns (AVG, arithmetic), whose
    per-value 95% half-widths are in Result.half_widths.
    ci95: the 95% confidence half-width of a plain aggregate (the same for every row); for a
    derived column the widest of its released values' half-widths, which are simulated from
    the mechanisms' noise distributions (postprocess.simulated_half_width); None if one is
    unbounded or no row was released.
    mechanism "exponential" (a quantile, MIN or MAX): noise_scale is the mechanism's temperature and
    ci95 its 95% rank error, in rows of the group (the value's rank is within ci95 of q*(n-1), up to
    one bin of the declared range), not value units; its per-value half-widths are None.
    """
    mechanism: str
    noise_scale: float | None
    ci95: float | None


@dataclass
class Result:
    columns: list[str]
    types: list[str]                      # per column: number, string, boolean, date, ...
    rows: list[tuple]
    kind: str                             # private | public | explain | show | set | empty
    accuracy: list[Accuracy | None] = field(default_factory=list)
    half_widths: list[tuple] = field(default_factory=list)   # per row, per column; None = exact
    cost: Cost | None = None
    spending: Spending | None = None
    tag: str = ""                         # command tag, e.g. "SELECT 3", "SET"
    db_types: list[str] = field(default_factory=list)   # per column: SQL type name (DOUBLE for noisy values)
    cached: bool = False                  # an identical earlier answer, repeated free of charge
    surcharge: float = 0.0                # epsilon added because the query selects people by identity
    truncated: int = 0                    # released groups cut by [limits] max_released_rows
    # Groups removed by partition selection: 0 when no group can have been (no GROUP BY, or every
    # key has a public domain: exactly the domain is released); None when partition selection ran,
    # whose number of suppressed groups is not released (it depends on the data: the argument is
    # in Session._present). Always None for results that are not private.
    suppressed: int | None = None
    topk: str = ""                        # SET dpsql.topk: how the released keys were chosen, for the status line

    @property
    def status(self) -> str:
        """One line for people: what it cost and what is left."""
        if self.cost is None or self.spending is None:
            return self.tag
        s = self.spending
        if s.accountant == "zcdp":
            return self._zcdp_status()
        extra = (f" (incl. a surcharge of {self.surcharge:g} for selecting people by identity)"
                 if self.surcharge else "")
        if self.cached:
            return (f"repeated the identical earlier answer; nothing charged; "
                    f"remaining epsilon {s.epsilon_remaining:g}, delta {s.delta_remaining:g}")
        if self.truncated:
            extra += (f"; {self.truncated} more released groups were cut by the policy's "
                      f"max_released_rows (add LIMIT or narrow the query)")
        return (f"epsilon charged {self.cost.epsilon:g}" + extra
                + (f", delta {self.cost.delta:g}" if self.cost.delta else "")
                + f"; remaining epsilon {s.epsilon_remaining:g}, delta {s.delta_remaining:g}"
                + self._suppressed_note() + self.topk)

    def _suppressed_note(self) -> str:
        """The status line's word on groups partition selection removed: how many when that is a
        public fact (none), else that some may have been, never how many or which."""
        if self.kind != "private" or self.cached:
            return ""
        if self.suppressed is None:
            return ("; partition selection may have suppressed groups with too few people "
                    "(how many is not released: it depends on the data)")
        return ""

    def _zcdp_status(self) -> str:
        """The status under zCDP accounting: rho charged, rho left, and the epsilon spent so far."""
        s = self.spending
        left = (f"remaining rho {s.rho_remaining:.4g} of {s.rho_total:.4g} (epsilon {s.epsilon_spent:.3g} "
                f"of {s.epsilon_total:g} spent at delta {s.delta_total:g})")
        if self.cached:
            return f"repeated the identical earlier answer; nothing charged; {left}"
        c = self.cost
        alone = f"this query alone: epsilon {c.epsilon - self.surcharge:g}" + (f", delta {c.delta:g}" if c.delta else "")
        extra = "; incl. a surcharge for selecting people by identity" if self.surcharge else ""
        part = f", delta {c.zcdp_delta:g} (partition selection)" if c.zcdp_delta else ""
        cut = (f"; {self.truncated} more released groups were cut by the policy's max_released_rows "
               "(add LIMIT or narrow the query)" if self.truncated else "")
        return (f"rho charged {float(c.rho or 0):.4g}{part} ({alone}{extra}){cut}; {left}" + self._suppressed_note()
                + self.topk)


class Session:
    """One analyst's connection: the pipeline and its settings."""

    def __init__(self, engine: Engine, policy: Policy, analyst: str, *, rng=None,
                 ledger: Ledger | None = None, own_engine: bool = True, schema: Schema | None = None,
                 on_schema=None, plans: PlanCache | None = None):
        if not isinstance(analyst, str) or not _ANALYST.match(analyst):
            raise InterfaceError("analyst must be a name of 1-128 letters, digits or . _ @ + -")
        self.engine, self.policy, self.analyst = engine, policy, analyst
        self.budget = policy.budget_for(analyst)
        self.rng = rng or SecureRng()
        self._own_engine = own_engine
        self._closed = False
        self._lock = threading.RLock()
        self._cancelled = threading.Event()     # set by cancel() while a statement runs
        self._started = time.monotonic()        # when the running (or last) statement began
        self.schema = schema if schema is not None else read_schema(policy, engine)
        self._on_schema = on_schema         # told of a re-read schema (Backend shares it with new sessions)
        if ledger is None:
            ledger = Ledger(_ledger_path(policy))
        self.ledger = ledger
        self.audit = AuditLog(_audit_path(policy))
        d = policy.defaults
        self.epsilon, self.delta, self.mechanism = d.epsilon, d.delta, d.mechanism
        self.rho: float | None = self._default_rho()   # SET dpsql.rho: calibrate each query to this zCDP cost
        self._plans = plans if plans is not None else PlanCache(_PLAN_CACHE)   # recent plans and their SQL
        self.plan_queries = 0               # SET dpsql.plan_queries: EXPLAIN DP compares k such queries
        self.intervals = False              # SET dpsql.intervals: <col>_low, <col>_high after noisy columns
        self.round = False                  # SET dpsql.round: counts as whole numbers, at least 0
        self.topk = "off"                   # SET dpsql.topk: 'noisy_max' answers ORDER BY agg LIMIT k by selection

    @staticmethod
    def demo() -> tuple[Path, Path, str]:
        """The bundled demo's database, policy and analyst (created on first use)."""
        from dpsql.demo import DEMO_ANALYST, ensure_demo
        db, policy = ensure_demo()
        return db, policy, DEMO_ANALYST

    @classmethod
    def open(cls, target: Any, policy: Any, analyst: str | None, *, rng=None, **engine_options: Any) -> Session:
        """Open a session on a target (None: the bundled demo, created on first use)."""
        if target is None:
            db, demo_policy, demo_analyst = cls.demo()
            target, policy = str(db), policy or str(demo_policy)
            analyst = analyst or demo_analyst
        if policy is None:
            raise InterfaceError("a policy is needed: a TOML file path or a dict")
        if analyst is None:
            raise InterfaceError("an analyst is needed: whose privacy budget to charge")
        pol = load_policy(policy)
        engine = open_engine(target, sources=path_sources(pol), types=pol.file_types(), **engine_options)
        try:
            return cls(engine, pol, analyst, rng=rng)
        except BaseException:
            engine.close()
            raise

    # -- context management
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.ledger.close()
        finally:
            if self._own_engine:
                self.engine.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the pipeline
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Result:
        if self._closed:
            raise InterfaceError("the session is closed")
        with self._lock:
            self._cancelled.clear()
            self._started = time.monotonic()
            try:
                # A query planned before (same text, parameters, settings and schema) needs no
                # parsing: classify(sql, params) gave it the key it is kept under.
                planned = self._plans.get(self._plan_key(sql, repr(params) if params is not None else ""),
                                          self.schema)
                if planned is not None:
                    return self._run_planned(planned, lambda: classify(sql, params))
                return self._dispatch(classify(sql, params))
            except Error:
                raise
            except Exception as err:  # a dpsql bug: fail closed, nothing released
                log.exception("internal error")
                raise InternalError(f"internal error ({type(err).__name__}); nothing was released") from None

    def _dispatch(self, stmt: Statement) -> Result:
        if stmt.kind == "empty":
            return Result([], [], [], "empty", tag="EMPTY")
        if stmt.kind == "set":
            return self._set(stmt.name, stmt.value)
        if stmt.kind == "reset":
            return self._reset(stmt.name)
        if stmt.kind == "show":
            return self._show(stmt.name)
        planned = self._analyze(stmt)
        if stmt.kind == "explain":
            if isinstance(planned, PublicQuery):
                return _explain_result(explain.public_rows(planned.sql), stmt.name, self.engine.dialect)
            return self._explain(planned, stmt.name)
        return self._run_planned(planned, lambda: stmt)

    def _run_planned(self, planned: QueryPlan | PublicQuery, statement) -> Result:
        """Run a query's plan; statement() gives its Statement, needed only to plan it again."""
        try:
            result = self._run(planned)
        except SchemaChanged:
            # A fact the plan relied on no longer holds (found before anything ran or was
            # charged): read the schema again and plan the query afresh, once.
            self._refresh_schema()
            planned = self._analyze(statement())
            result = self._run(planned)
        return self._present(result, planned) if isinstance(planned, QueryPlan) else result

    def _present(self, r: Result, plan: QueryPlan) -> Result:
        """The released result as this session's settings show it (postprocess.present): only
        post-processing of released values and public facts of the plan."""
        counts = postprocess.through([o.noisy and isinstance(o.expr, postprocess.Ref) and _is_count(plan, o.expr.name)
                                      for o in plan.outputs], plan.wraps, False)
        noisy = postprocess.through([o.noisy for o in plan.outputs], plan.wraps, False)
        bounds = postprocess.through([(float(o.expr.lo), float(o.expr.hi))
                                      if o.noisy and isinstance(o.expr, postprocess.Avg) else None
                                      for o in plan.outputs], plan.wraps, None)
        p = postprocess.present(r.columns, r.types, r.db_types, r.rows, r.accuracy, r.half_widths, counts, noisy,
                                intervals=self.intervals, round_counts=self.round, bounds=bounds,
                                check=None if r.cached else self.check)
        r.columns, r.types, r.db_types, r.rows, r.accuracy, r.half_widths = p
        # How many groups partition selection removed, and why only this may be released.
        # Without selection (no GROUP BY, or every key with a public domain) the released groups
        # are exactly the public domain's: none is removed, and 0 is a fact of the plan. (HAVING,
        # LIMIT and the wrappers drop released rows afterwards: post-processing of released
        # values, not suppression.) With selection the candidate groups are the keys found in
        # the data, so the number of candidates, and with it "candidates - released", is a
        # function of the data that no mechanism noised: a group held by a single person that
        # selection removed would still add 1 to it, exactly what selection exists to hide.
        # So it is not released, not even as a bound: None, and the status line says only that
        # some groups may have been suppressed. (Releasing it would need a noisy count of
        # candidates, charged like any other measure.)
        r.suppressed = None if plan.selection is not None else 0
        t = plan.topk
        if t is not None and not r.cached:
            r.topk = (f"; the rows are the {'top' if t.desc else 'bottom'} {t.k} of {t.candidates} keys chosen by "
                      "report-noisy-max, in its rank order (SET dpsql.topk)")
        return r

    def _run(self, planned: QueryPlan | PublicQuery) -> Result:
        if isinstance(planned, PublicQuery):
            return self._run_public(planned)
        return self._run_private(planned)

    def _refresh_schema(self) -> None:
        self.schema = read_schema(self.policy, self.engine)
        if self._on_schema is not None:
            self._on_schema(self.schema)

    def _expect(self, refs: Sequence[str], public: Sequence[str] = ()) -> dict[str, TableFacts]:
        """The schema facts a query relies on, to be checked in its own transaction: every fact
        read of each relation a private query reads (types for totality, keys for the shortcut and
        for links, NOT NULL for the unit filter), and that each table of a public query is still a
        base table (a view in its place could read a protected table row by row)."""
        out = {ref: self.schema.facts[ref] for ref in refs if ref in self.schema.facts}
        out.update((name, TableFacts("table")) for name in public if name not in out)
        return out

    def _analyze(self, stmt: Statement) -> QueryPlan | PublicQuery:
        """The statement's plan. Plans are a pure function of the text (with its parameters), the
        settings, the policy and the schema, so each session keeps its recent ones: a dashboard's
        repeated query skips parsing, analysis and rewriting. A plan whose keys read a public
        table's values is not kept (the table's rows may change)."""
        key = self._plan_key(stmt.text, stmt.params)
        hit = self._plans.get(key, self.schema)
        if hit is not None:
            return hit
        planned = self._plan_now(stmt)
        if not (isinstance(planned, QueryPlan) and (planned.public_reads or any(k.domain_source for k in planned.keys))):
            self._plans.put(key, self.schema, planned)
        return planned

    def _plan_key(self, text: str, params: str) -> tuple:
        """What a plan is a function of, besides the policy (fixed for a session and a Backend) and
        the schema (checked by identity): the text and parameters, every setting analysis reads
        (Settings, dpsql.rho, dpsql.topk) and the analyst (see PlanCache)."""
        return (text, params, self.epsilon, self.delta, self.mechanism, self.rho, self.topk, self.budget.delta,
                self.analyst, id(self.schema))

    def _sql(self, plan: QueryPlan) -> str:
        """The rewrite of a plan in the engine's dialect, kept with the plan."""
        dialect = self.engine.dialect
        sql = self._plans.derived(plan, ("sql", dialect))
        if sql is None:
            sql = to_sql(plan, dialect)
            self._plans.put_derived(plan, ("sql", dialect), sql)
        return sql

    def _analysis(self, stmt: Statement, settings: Settings) -> QueryPlan | PublicQuery:
        """analyze, then (SET dpsql.topk = 'noisy_max') a top-k query as a selection
        (dpsql.analysis.topk): refused there when its shape is not supported, never answered as a
        histogram instead."""
        planned = analyze(stmt.tree, self.policy, self.schema, settings, self.engine.dialect, self._domain)
        if self.topk != "off" and isinstance(planned, QueryPlan) and topk_plan.applies(planned):
            planned = topk_plan.plan_topk(planned, settings.epsilon, settings.delta, settings.mechanism)
        return planned

    def _plan_now(self, stmt: Statement) -> QueryPlan | PublicQuery:
        settings = Settings(self.epsilon, self.delta, self.mechanism, self.budget.delta)
        planned = analyze(stmt.tree, self.policy, self.schema, settings, self.engine.dialect, self._domain)
        auto = auto_bounds.find(planned, self.policy, self.epsilon) if isinstance(planned, QueryPlan) else None
        if self.topk != "off" and isinstance(planned, QueryPlan) and topk_plan.applies(planned):
            # a top-k as a selection (dpsql.analysis.topk), refused there (auto bounds too) when its
            # shape is not supported: never answered as a histogram instead
            planned = topk_plan.plan_topk(_replace(planned, auto=auto), self.epsilon, self.delta, self.mechanism)
        if auto is not None:    # bounds = "auto": the aggregates get the epsilon the bound choice leaves
            if self.rho is not None:
                raise QueryRejected("an auto-bounded column with dpsql.rho", "its bound choice is calibrated "
                                    "in epsilon", "RESET dpsql.rho and SET dpsql.epsilon")
            rest = Settings(float(Fraction(self.epsilon) * (1 - auto_bounds.SHARE)), self.delta, self.mechanism,
                            self.budget.delta)
            rest_plan = analyze(stmt.tree, self.policy, self.schema, rest, self.engine.dialect, self._domain)
            return _replace(rest_plan, cost=planned.cost, auto=auto)
        if self.rho is not None and isinstance(planned, QueryPlan):
            planned = self._at_rho(stmt, planned)
        return planned

    def _auto_bound(self, plan: QueryPlan) -> QueryPlan:
        """bounds = "auto" (dpsql.analysis.auto_bounds): one engine query counts, per candidate bound,
        the units above it; AboveThreshold picks the bound; the query is planned again with it, at
        the epsilon left. Only the chosen bound leaves this function (in the plan)."""
        auto = plan.auto
        dialect = self.engine.dialect
        sql = count_sql(plan, auto, dialect)
        rows = self.engine.run(sql, expect=self._expect([ref for _, ref in plan.tables])).rows
        counts = rows[0] if rows else (0,) * len(auto.candidates)
        j = auto_bounds.above_threshold(counts, auto, self.rng, _laplace)
        bound = auto.candidates[j] if j is not None else auto.upper
        policy = auto_bounds.with_bound(self.policy, auto, bound)
        rest = Settings(float(Fraction(plan.cost.epsilon) * (1 - auto_bounds.SHARE)), self.delta, self.mechanism,
                        self.budget.delta)
        final = analyze(classify(plan.text).tree, policy, self.schema, rest, dialect, self._domain)
        return _replace(final, cost=plan.cost, auto=_replace(auto, chosen=bound))

    def _at_rho(self, stmt: Statement, plan: QueryPlan) -> QueryPlan:
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
        target = self.rho
        for _ in range(4):
            eps = epsilon_for_rho(parts, target)
            settings = Settings(eps, self.delta, self.mechanism, self.budget.delta)
            planned = self._analysis(stmt, settings)
            got = self._rho_of(planned)[0]
            if got <= Fraction(self.rho):
                return planned
            target *= 0.999999 * float(Fraction(self.rho) / got)
        raise InternalError("could not calibrate the query to dpsql.rho; nothing was released")

    def _domain(self, table: str, column: str, what: str = "values") -> tuple:
        """A public table column's distinct values as text (a GROUP BY key's public domain): public
        data, read once per query; at most MAX_PUBLIC_GROUPS + 1 of them. what="range": its
        (MIN, MAX) as text instead (arithmetic on a public column: grouping.Grouping._public_range)."""
        from sqlglot import exp as _exp

        from dpsql.analysis.budget import MAX_PUBLIC_GROUPS
        if what == "range":
            c = _exp.column(column)
            sel = _exp.select(*(_exp.Cast(this=f(this=c.copy()), to=_exp.DataType.build("TEXT"))
                                for f in (_exp.Min, _exp.Max))).from_(_exp.to_table(table))
            row = self.engine.run(sel.sql(self.engine.dialect), expect=self._expect([table], [table])).rows[0]
            return row[0], row[1]
        col = _exp.Cast(this=_exp.column(column), to=_exp.DataType.build("TEXT"))
        sel = _exp.select(col).distinct().from_(_exp.to_table(table)).limit(MAX_PUBLIC_GROUPS + 1)
        rows = self.engine.run(sel.sql(self.engine.dialect), expect=self._expect([table], [table]))
        if len(rows.rows) > MAX_PUBLIC_GROUPS:
            raise QueryRejected(f"GROUP BY {column}", f"the public table has more than {MAX_PUBLIC_GROUPS} values")
        return tuple(sorted((r[0] for r in rows.rows), key=lambda v: (v is None, v or "")))


    def plan(self, sql: str, *, cached: bool = True) -> QueryPlan | PublicQuery:
        """Analyse a query without running or charging it (for tools and tests); cached=False
        plans it afresh even if the session keeps a plan for it."""
        stmt = classify(sql, None)
        if stmt.kind not in ("query", "explain"):
            raise QueryRejected("a command", "only queries have plans")
        return self._analyze(stmt) if cached else self._plan_now(stmt)

    def _mechanisms(self, plan: QueryPlan):
        """The plan's mechanisms (immutable, a function of the plan alone), kept with the plan."""
        kept = self._plans.derived(plan, ("mechanisms",))
        if kept is not None:
            return kept
        mechs = {spec.target: make_mechanism(spec.mechanism, spec.sensitivity, spec.epsilon, spec.delta)
                 for spec in plan.noise if spec.mechanism.additive}
        mechs.update(_quantile_mechanisms(plan))
        t = plan.topk
        if t is not None:
            mechs[topk_plan.TARGET] = NoisyTopK(t.epsilon, t.k, t.sensitivity, t.monotone, t.candidates)
        sel = None
        if plan.selection_noise is not None:
            s = plan.selection_noise
            sel = make_mechanism("laplace", s.l1, s.epsilon, 0.0)
        self._plans.put_derived(plan, ("mechanisms",), (mechs, sel))
        return mechs, sel

    def _run_public(self, q: PublicQuery) -> Result:
        rows = self.engine.run(q.sql, expect=self._expect((), q.tables))
        return Result(list(rows.columns), [_type_name(t) for t in rows.types], rows.rows, "public",
                      accuracy=[None] * len(rows.columns),
                      half_widths=[(None,) * len(rows.columns) for _ in rows.rows],
                      tag=f"SELECT {len(rows.rows)}", db_types=list(rows.types))

    def _run_private(self, plan: QueryPlan) -> Result:
        """Answer a private query; released no earlier than the policy's [timing] allows."""
        start = time.monotonic()
        try:
            return self._answer(plan)
        finally:
            release_delay(start, self.policy.timing)

    def _answer(self, plan: QueryPlan) -> Result:
        recon = self.policy.reconstruction
        key = self._answer_key(plan) if recon.cache_lifetime > 0 else None
        hit = self.ledger.cached(self.analyst, key, recon.cache_lifetime) if key else None
        if hit is not None:
            result = self._from_cache(hit)
            if plan.subset is not None and plan.subset.flagged:
                self._audit("subset_repeat", plan, charged=Cost(0.0, 0.0))
            return result
        if plan.auto is not None and plan.auto.chosen is None:
            plan = self._auto_bound(plan)
        sql = self._sql(plan)
        mechs, sel = self._mechanisms(plan)
        params, charged, surcharge, subset, rho_q = self._charge_parts(plan)
        b = self.budget
        after: list[Spending] = []          # the spending the charge's own transaction left

        def charge() -> None:
            """Charge first: called by the engine inside the query's transaction, after the schema
            facts are checked and before the query runs. If it raises, nothing runs and nothing
            is released."""
            if self._cancelled.is_set():
                raise QueryCanceled("canceling statement due to user request: the query was cancelled")
            try:
                after.append(self.ledger.charge_with_spending(
                    self.analyst, charged.epsilon, charged.delta, epsilon_total=b.epsilon, delta_total=b.delta,
                    mechanism=plan.mechanism, params=params, query=plan.text, subset=subset, rho=rho_q,
                    zcdp_delta=charged.zcdp_delta, accountant=b.accountant)[1])
            except (QueryRejected, BudgetExhausted) as err:
                if subset is not None:
                    self._audit("subset_refused", plan, charged=charged, subset=subset, reason=err.sqlstate)
                if isinstance(err, BudgetExhausted):
                    raise self._what_fits(err, plan) from None
                raise
            if subset is not None:     # audited before anything runs: an unaudited answer is never released
                self._audit("subset_charged", plan, charged=charged, subset=subset, surcharge=surcharge)
        salted = plan.group_choice or any(isinstance(m, SampleAggregate) for m in plan.measures) or needs_salt(plan)
        bind = {SALT: self.rng.randbits(63)} if salted else None
        rows = self.engine.run(sql, bind, expect=self._expect([ref for _, ref in plan.tables]), before=charge)
        # From here on the charge is recorded (charge() ran inside the engine's transaction) and
        # nothing is released until this function returns: a cancel or the statement time limit,
        # checked between batches of every stage below (check), ends the statement with
        # QueryCanceled, so a cancelled query releases nothing and its budget stays spent.
        self.check()
        table = self._noise(plan, rows.rows, mechs, sel)
        spending = after[0]
        db_types = self._db_types(plan)
        accuracy = postprocess.through([self._accuracy(o, mechs) for o in plan.outputs], plan.wraps)
        accuracy = _widest(accuracy, table.widths)
        rows, widths, cut = table.rows, table.widths, table.cut
        limit = self.policy.limits.max_released_rows
        if len(rows) > limit:       # partition selection released more groups than the policy allows
            rows, widths, cut = rows[:limit], widths[:limit], len(rows) - limit
        result = Result(table.columns, [_type_name(t) for t in db_types], rows, "private", accuracy,
                        widths, charged, spending, tag=f"SELECT {len(rows)}", db_types=db_types,
                        surcharge=surcharge, truncated=cut)
        self.check()
        if key is not None:
            self.ledger.remember(self.analyst, key, self._to_cache(result), recon.cache_lifetime,
                                 self.policy.limits.max_cached_bytes)
        return result

    def check(self) -> None:
        """Between batches of the work after the engine (release, post-processing, the proxy's row
        encoding): raise QueryCanceled, with the engine's own words, if the statement was cancelled
        (cancel(), a client's CancelRequest or disconnect) or has run past the engine's statement
        timeout; else let other threads run (the batches hold the GIL). Time is counted from the
        start of execute(), as PostgreSQL counts statement_timeout from the statement's start."""
        if self._cancelled.is_set():
            raise QueryCanceled("canceling statement due to user request: the query was cancelled")
        limit = getattr(self.engine, "statement_timeout", None)
        if limit is not None and time.monotonic() - self._started > limit:
            raise QueryCanceled("canceling statement due to statement timeout: the query ran longer than "
                                "the engine's statement timeout")
        time.sleep(0)

    def _batches(self, release, values: list) -> list:
        """release(batch) over values in batches of vector.BATCH, checking between them."""
        out: list = []
        for at in range(0, len(values), vector.BATCH):
            self.check()
            out.extend(release(values[at:at + vector.BATCH]))
        return out

    def _charge_parts(self, plan: QueryPlan) -> tuple[ChargeParams, Cost, float, SubsetCharge | None, Decimal]:
        """What the ledger records of a query and charges it: the mechanisms' parameters (the
        charge's params), the cost with its surcharge, the subset series and the rho rounded up.
        Functions of the plan and the policy alone, so they are kept with the plan (a repeated
        query does not rebuild them); the params are frozen and encoded once (ChargeParams)."""
        kept = self._plans.derived(plan, ("charge",))
        if kept is not None:
            return kept
        mechs, sel = self._mechanisms(plan)
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
        charged, surcharge, subset = self._charge_of(plan)
        if subset is not None:
            params["subset_selection"] = {"population": subset.population,
                                          "surcharge": self.policy.reconstruction.surcharge}
        parts = (ChargeParams(plan.mechanism, params), charged, surcharge, subset, accounting.decimal_up(charged.rho))
        self._plans.put_derived(plan, ("charge",), parts)
        return parts

    def _what_fits(self, err: BudgetExhausted, plan: QueryPlan) -> BudgetExhausted:
        """The ledger's refusal with a hint the analyst can act on: how much is left and the
        setting at which this query would fit (its cost scales with the setting: linearly in
        epsilon and delta; SET dpsql.rho plans a query at a given rho), or that nothing fits.
        Computed from the budget, the settings and the plan only."""
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
        if what == "epsilon" and self.rho is None:
            fit = down(self.epsilon * left / need)
            if fit >= self.policy.defaults.min_epsilon:
                fix = f"SET dpsql.epsilon = {fit:g} (or lower) fits this query"
        elif what == "rho":
            flagged = plan.subset is not None and plan.subset.flagged
            fit = down(left / (1 + (self.policy.reconstruction.surcharge if flagged else 0)))
            if fit >= self.policy.defaults.rho_floor:
                fix = f"SET dpsql.rho = {fit:g} (or lower) fits this query"
        elif what == "delta" and self.delta > 0:
            fit = down(self.delta * left / need)
            if fit > 0:
                fix = f"SET dpsql.delta = {fit:g} (or lower) fits this query"
        shown = f"{left:.6g}"
        hint = (f"{what} {shown} is left: {fix}; {admin}" if fix else
                f"{what} {shown} is left, less than the smallest query may use; {admin}")
        return BudgetExhausted(str(err), hint, resource=what, remaining=left, needed=need)

    # -- the reconstruction defence: surcharge, cap, cache, audit (dpsql.analysis.reconstruction, dpsql.guard)
    def _answer_key(self, plan: QueryPlan) -> str:
        # a top-k selection answers the same text differently from the histogram: its own key
        mechanism = plan.mechanism + ("+noisy_max" if plan.topk is not None else "")
        # plan.text is the aggregate query; window functions and SELECT DISTINCT over its rows
        # (dpsql.analysis.windows) are outer queries of their own, and answers differ by them
        text = plan.text + "".join(f"\n-- over the released rows: {w.sql}" for w in plan.wraps if hasattr(w, "sql"))
        return answer_key(str(getattr(self.engine, "name", type(self.engine).__name__)), text,
                          plan.cost.epsilon, plan.cost.delta, mechanism)

    def _charge_of(self, plan: QueryPlan) -> tuple[Cost, float, SubsetCharge | None]:
        """What a query is charged: its cost, plus the policy's surcharge (a fraction of its epsilon,
        the same fraction of its rho) when it selects people by identity; and the subset series it
        joins, if any. The cost carries its zCDP part (rho of the mechanisms actually used, at least
        the policy's min_rho, and partition selection's delta), whichever accountant checks it."""
        rho, part = self._rho_of(plan)
        floor = Fraction(self.policy.defaults.rho_floor)
        if plan.subset is None or not plan.subset.flagged:
            c = plan.cost
            return Cost(c.epsilon, c.delta, max(rho, floor), part), 0.0, None
        recon = self.policy.reconstruction
        surcharge = plan.cost.epsilon * recon.surcharge
        cap = recon.max_subset_queries if recon.max_subset_queries is not None else auto_cap
        tables = "+".join(sorted({t.name for t in plan.relation.policies})) if plan.relation else plan.table.name
        population = population_key(tables, tuple(m.label for m in plan.measures), plan.subset)
        rho = max(rho * (1 + Fraction(recon.surcharge)), floor)
        return (Cost(plan.cost.epsilon + surcharge, plan.cost.delta, rho, part), surcharge,
                SubsetCharge(population, plan.subset.named, cap))

    def _rho_of(self, plan: QueryPlan) -> tuple[Fraction, float]:
        """The plan's zCDP cost before surcharge and floor: the exact rho of its mechanisms
        (dpsql.accounting claims 1-3), and partition selection's delta."""
        mechs, sel = self._mechanisms(plan)
        rho = sum((m.rho for m in mechs.values()), Fraction(0))
        if plan.auto is not None:       # the bound choice: eps_svt-DP, so eps_svt^2/2-zCDP
            rho += plan.auto.rho
        if sel is None:
            return rho, 0.0
        return rho + sel.rho, plan.selection.delta

    def _outlook(self, charged: Cost) -> tuple[str, dict, list]:
        """For EXPLAIN DP: the accountant in force, how many more queries like this one the
        remaining budget allows under it and under basic composition, and the planned series."""
        b = self.budget
        t = self.ledger.totals(self.analyst)
        rho = accounting.decimal_up(charged.rho)
        left = {"zcdp": accounting.zcdp_count(t.rho, t.zcdp_delta, rho, charged.zcdp_delta, b.epsilon, b.delta),
                "basic": accounting.basic_count(t.epsilon, t.delta, charged.epsilon, charged.delta,
                                                b.epsilon, b.delta)}
        plans = (accounting.plan_series(self.plan_queries, charged.epsilon, charged.delta, rho, charged.zcdp_delta,
                                        b.epsilon, b.delta) if self.plan_queries else [])
        return t.accountant or b.accountant, left, plans

    def _audit(self, event: str, plan: QueryPlan, *, charged: Cost, subset: SubsetCharge | None = None,
               **fields: Any) -> None:
        p = plan.subset
        if subset is not None:
            state = self.ledger.subset_state(self.analyst, subset)
            fields.update(population=subset.population, answered=state.answered, cap=state.cap,
                          named=state.named)
        self.audit.write(event, self.analyst, query=plan.text,
                         classification={"kinds": list(p.kinds), "columns": list(p.columns),
                                         "selected": p.selected, "detail": p.describe()},
                         epsilon=charged.epsilon, delta=charged.delta, **fields)

    @staticmethod
    def _to_cache(r: Result) -> str:
        acc = [None if a is None else [a.mechanism, a.noise_scale, a.ci95] for a in r.accuracy]
        return encode({"columns": r.columns, "types": r.types, "db_types": r.db_types, "rows": r.rows,
                       "accuracy": acc, "half_widths": r.half_widths, "tag": r.tag,
                       "cost": [r.cost.epsilon, r.cost.delta], "surcharge": r.surcharge})

    def _from_cache(self, payload: str) -> Result:
        d = decode(payload)
        acc = [None if a is None else Accuracy(*a) for a in d["accuracy"]]
        return Result(d["columns"], d["types"], [tuple(r) for r in d["rows"]], "private", acc,
                      [tuple(h) for h in d["half_widths"]], Cost(0.0, 0.0), self.spending(), tag=d["tag"],
                      db_types=d["db_types"], cached=True)

    def _noise(self, plan: QueryPlan, rows: list[tuple], mechs, sel) -> postprocess.Table:
        """Partition selection, then noise on every measure of every released group.

        Group keys arrive as text (dpsql.rewrite.keys). Nothing here can fail on
        a key's value: public-domain keys are looked up in their domain, and selected keys are
        turned into typed values only once released, by _typed_key, which never raises."""
        nk, measures = len(plan.keys), plan.measures
        types = [k.sql_type for k in plan.keys]
        groups: dict[tuple, tuple] = {}
        for r in rows:
            groups[tuple(r[:nk])] = r[nk:]
        if plan.keys and plan.selection is None:      # public domains: exactly the domain
            lookups = [_domain_lookup(k.domain, t) for k, t in zip(plan.keys, types)]
            found = {}
            for text_key, values in groups.items():
                key = tuple(look(t) for look, t in zip(lookups, text_key))
                if _OUTSIDE not in key:
                    found[key] = values
            zero = (0,) * (len(measures))
            domain = itertools.product(*[k.domain for k in plan.keys])
            read = [k.domain_source is not None for k in plan.keys]    # a public table's values, as text
            if any(read):
                groups = {tuple(_typed_key(v, ty) if r else v for v, ty, r in zip(key, types, read)):
                          found.get(key, zero) for key in domain}
            else:
                get = found.get
                groups = {key: get(key, zero) for key in domain}
        elif not plan.keys:
            groups = groups or {(): (0,) * len(measures)}
        if plan.topk is not None:
            return self._top(plan, groups, mechs)
        widths = {m.name: mechs[m.name].half_width() for m in measures}
        widths.update({q.name: math.inf for q in plan.quantiles})    # a value's error is not bounded; its rank's is
        widths.update({dc.name: mechs[dc.name].half_width() for dc in plan.distincts})
        at = len(measures) + (1 if sel is not None else 0)    # distinct counts, then histograms, follow _units
        hists = {h: at + len(plan.distincts) + i for i, h in enumerate(quantile_histograms(plan))}
        # Every group's values are released at once, one column at a time, in batches
        # (dpsql.noise.vector: the same exact laws as each mechanism's release, from the CSPRNG);
        # which groups are released depends only on the selection's noisy counts, as before.
        rng = self.rng
        keys, rows_of = list(groups), list(groups.values())
        cut = 0
        if sel is not None:
            units = [r[len(measures)] or 0 for r in rows_of]
            noisy = self._batches(lambda b: vector.release_values(sel, b, rng), units)
            kept = [i for i, u in enumerate(noisy) if u > plan.selection.threshold]
            keys = [tuple(_typed_key(t, ty) for t, ty in zip(keys[i], types)) for i in kept]
            rows_of = [rows_of[i] for i in kept]
            # Selected groups: the engine's row order depends on the data (hash tables,
            # threads), so release them in an order fixed by the keys alone (a total order).
            order = sorted(range(len(keys)), key=lambda i: _key_order(keys[i]))
            keys, rows_of = [keys[i] for i in order], [rows_of[i] for i in order]
            # Only the first max_released_rows of them (in that order) can be released when
            # nothing after this reorders or filters them: the rest are cut before their values
            # are drawn, not after (the same rows, and the same count of cut ones, either way).
            most, final = self.policy.limits.max_released_rows, plan.limit
            if (len(keys) > most and plan.having is None and not plan.order and not plan.offset
                    and not plan.wraps and (final is None or final > most)):
                cut = min(len(keys), final if final is not None else len(keys)) - most
                keys, rows_of = keys[:most], rows_of[:most]
        columns = {}
        for j, m in enumerate(measures):
            mech, div = mechs[m.name], m.divisor
            columns[m.name] = self._batches(lambda b: vector.release_values(mech, b, rng, div),
                                            [r[j] for r in rows_of])
        for i, dc in enumerate(plan.distincts, at):
            mech = mechs[dc.name]
            columns[dc.name] = self._batches(lambda b: vector.release_values(mech, b, rng),
                                             [r[i] if i < len(r) else None for r in rows_of])
        for q in plan.quantiles:
            i, em = hists[q.hist], mechs[q.name]
            columns[q.name] = self._batches(lambda b: vector.release_quantiles(em, b, rng),
                                            [r[i] if i < len(r) else None for r in rows_of])
        self.check()
        names = list(columns)
        released = [(key, dict(zip(names, vals)), widths) for key, vals in zip(keys, zip(*columns.values()))] \
            if names else [(key, {}, widths) for key in keys]
        outputs = [(o.name, o.expr, o.noisy) for o in plan.outputs]
        noise = {m.name: (mechs[m.name].name, mechs[m.name].scale) for m in measures}
        table = postprocess.finish(released, outputs, plan.having, plan.order, plan.limit, plan.offset, noise,
                                   check=self.check)
        table = postprocess.wrap(table, plan.wraps, check=self.check)
        table.cut = cut
        return table

    def _top(self, plan: QueryPlan, groups: dict, mechs) -> postprocess.Table:
        """SET dpsql.topk: the k keys report-noisy-max chooses from the public domain's exact bounded
        aggregates (dpsql.noise.topk: nothing else of them leaves this function), in its rank order;
        each with the aggregate measured afresh when the query outputs it (dpsql.analysis.topk)."""
        t = plan.topk
        m = plan.measure(t.measure)
        keys = list(groups)
        scores = []
        for key in keys:
            v = groups[key][0]
            exact = Fraction(0 if v is None else v) / m.divisor     # ints and Decimals: exact
            scores.append(exact if t.desc else -exact)
        chosen = mechs[topk_plan.TARGET].choose(scores, self.rng)
        released = []
        for i in chosen:
            env, widths = {}, {}
            if t.values:
                v = groups[keys[i]][0]
                env[m.name] = mechs[m.name].release(Fraction(0 if v is None else v) / m.divisor, self.rng)
                widths[m.name] = mechs[m.name].half_width()
            released.append((keys[i], env, widths))
        outputs = [(o.name, o.expr, o.noisy) for o in plan.outputs]
        noise = {m.name: (mechs[m.name].name, mechs[m.name].scale)} if t.values else None
        table = postprocess.finish(released, outputs, None, (), None, 0, noise)
        return postprocess.wrap(table, plan.wraps)

    def _db_types(self, plan: QueryPlan) -> list[str]:
        """The SQL type of each output: noisy values are DOUBLE; group keys keep their column's type."""
        out = []
        for o in plan.outputs:
            if o.noisy:
                out.append("DOUBLE")
            elif isinstance(o.expr, postprocess.Key):
                out.append(plan.keys[o.expr.index].sql_type or "VARCHAR")
            else:
                out.append("VARCHAR")
        return postprocess.through(out, plan.wraps, "VARCHAR")

    # -- for front ends that describe before they execute (the wire protocol's Describe)
    def describe(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
                 ) -> tuple[list[str], list[str]]:
        """Result column names and SQL types of a statement, without running or charging it.

        Raises what execute would raise for a statement outside the subset. Commands (SET, ...)
        have no columns, except SHOW."""
        if self._closed:
            raise InterfaceError("the session is closed")
        with self._lock:
            stmt = classify(sql, params)
            if stmt.kind in ("empty", "set", "reset"):
                return [], []
            if stmt.kind == "show":
                r = self._show(stmt.name)
                return r.columns, ["DOUBLE" if t == "number" else "VARCHAR" for t in r.types]
            planned = self._analyze(stmt)
            if stmt.kind == "explain":
                return (list(explain.columns(stmt.name)),
                        ["DOUBLE" if t == "number" else "VARCHAR" for t in explain.types(stmt.name)])
            if isinstance(planned, PublicQuery):
                rows = self.engine.run(f"SELECT * FROM ({planned.sql}) AS q LIMIT 0")
                return list(rows.columns), list(rows.types)
            names, types = _output_names(planned), self._db_types(planned)
            r = self._present(Result(names, [_type_name(t) for t in types], [], "private", [], [], db_types=types),
                              planned)
            return r.columns, r.db_types

    def tables(self) -> dict[str, dict[str, str]]:
        """What an analyst may see of the schema: each protected table (by its policy name) and each
        base table the policy declares public, with its columns and their SQL types. No rows, no
        statistics; a table the policy does not mention is not listed."""
        out = {name: dict(cols) for name, cols in self.schema.columns.items()}
        for name in sorted(self.schema.public):
            out.setdefault(name, dict(self.schema.public[name]))
        return out

    @staticmethod
    def _accuracy(output, mechs) -> Accuracy | None:
        if not output.noisy:
            return None
        expr = output.expr
        if isinstance(expr, postprocess.Clamp):      # sample-and-aggregate: [mid +] one noisy mean, clamped
            expr = expr.arg.b if isinstance(expr.arg, postprocess.Add) else expr.arg
        if isinstance(expr, postprocess.Ref):
            m = mechs[expr.name]
            return Accuracy(m.name, m.scale, m.half_width())
        names = output.expr.refs()
        kinds = {mechs[n].name for n in names}
        return Accuracy(kinds.pop() if len(kinds) == 1 else "mixed", None, None)

    # -- EXPLAIN DP
    def _explain(self, plan: QueryPlan, form: str | None = "facts") -> Result:
        mechs, sel = self._mechanisms(plan)
        charged, surcharge, subset = self._charge_of(plan)
        recon = self.policy.reconstruction
        cached = recon.cache_lifetime > 0 and self.ledger.cached(
            self.analyst, self._answer_key(plan), recon.cache_lifetime) is not None
        series = self.ledger.subset_state(self.analyst, subset) if subset is not None else None
        raw = self._rho_of(plan)[0] * (1 + Fraction(recon.surcharge) if surcharge else 1)
        rows = explain.private_rows(plan, self._sql(plan), mechs, sel, charged=charged,
                                    surcharge=surcharge, recon=recon, cached=cached, series=series,
                                    floored=charged.rho > raw, outlook=self._outlook(charged))
        if plan.auto is not None:
            a = plan.auto
            rows.insert(len(plan.noise), explain._pad(("auto_bound", f"upper clip of {a.column}", "above_threshold",
                                                       1.0, a.epsilon, 0.0, None, None, a.describe(), float(a.rho))))
        return _explain_result(rows, form, self.engine.dialect)

    # -- SET / RESET / SHOW
    def _set(self, name: str, value: str) -> Result:
        if not name.startswith("dpsql."):
            raise QueryRejected(f"SET {name}", "only dpsql.epsilon, dpsql.rho, dpsql.delta, dpsql.mechanism and "
                                "dpsql.plan_queries can be set", "engine settings are fixed by the data owner")
        key = name[len("dpsql."):]
        if key == "rho":
            self.rho = self._rho_setting(name, value)
        elif key == "plan_queries":
            try:
                k = int(value.strip())
            except (TypeError, ValueError):
                raise InvalidSetting("dpsql.plan_queries must be a whole number") from None
            if not 0 <= k <= 10 ** 9:
                raise InvalidSetting("dpsql.plan_queries must be between 0 (off) and 1000000000")
            self.plan_queries = k
        elif key in ("intervals", "round"):
            setattr(self, key, _bool_setting(name, value))
        elif key == "topk":
            v = str(value).strip().strip("'\"").lower()
            if v not in topk_plan.SETTING_VALUES:
                raise InvalidSetting("dpsql.topk must be 'off' or 'noisy_max'")
            self.topk = v
        elif key == "epsilon":
            eps = _float_setting(name, value)
            if not eps > 0:
                raise InvalidSetting("dpsql.epsilon must be positive")
            floor = self.policy.defaults.min_epsilon
            if eps < floor:
                raise InvalidSetting(f"dpsql.epsilon {eps:g} is below the policy's minimum {floor:g} per query: "
                                     "every answer also reveals a little that is not noised (such as its run "
                                     "time), so the number of queries one budget buys is bounded")
            total = self.budget.epsilon
            if eps > total:
                raise InvalidSetting(f"dpsql.epsilon {eps:g} exceeds the lifetime budget {total:g}")
            spending = self.spending()
            left = spending.epsilon_remaining
            if spending.accountant == "basic" and eps > left:   # under zCDP the ledger checks the query's rho
                raise InvalidSetting(f"dpsql.epsilon {eps:g} exceeds the remaining budget {left:g}")
            self.epsilon, self.rho = eps, None
        elif key == "delta":
            delta = _float_setting(name, value)
            if not 0 <= delta < 1:
                raise InvalidSetting("dpsql.delta must be in [0, 1)")
            if delta > self.budget.delta:
                raise InvalidSetting(f"dpsql.delta {delta:g} exceeds the lifetime budget {self.budget.delta:g}")
            if delta == 0 and self.mechanism != "laplace":
                raise InvalidSetting("the Gaussian mechanism needs dpsql.delta > 0")
            self.delta = delta
        elif key == "mechanism":
            mech = value.strip().lower()
            if mech not in MECHANISMS:
                raise InvalidSetting(f"dpsql.mechanism must be one of {', '.join(MECHANISMS)}")
            if mech != "laplace" and self.delta <= 0:
                raise InvalidSetting("the Gaussian mechanism needs dpsql.delta > 0; SET dpsql.delta first")
            self.mechanism = mech
        elif key in ("analyst", "budget", "spent", "ledger", "policy", "accountant"):
            raise QueryRejected(f"SET {name}", "the analyst, the budget, its accountant and the spending are fixed "
                                "by the policy")
        else:
            raise InvalidSetting(f"unknown setting {name}; settable: dpsql.epsilon, dpsql.rho, dpsql.delta, "
                                 "dpsql.mechanism, dpsql.plan_queries, dpsql.intervals, dpsql.round, dpsql.topk")
        return Result([], [], [], "set", tag="SET")

    def _default_rho(self) -> float | None:
        """The policy's per-query rho ([defaults] rho), for analysts kept under zCDP accounting."""
        d = self.policy.defaults
        return d.rho if d.rho is not None and self.spending().accountant == "zcdp" else None

    def _rho_setting(self, name: str, value: str) -> float:
        """SET dpsql.rho: each following query's noise is calibrated to cost this much rho (zCDP only)."""
        rho = _float_setting(name, value)
        if not rho > 0:
            raise InvalidSetting("dpsql.rho must be positive")
        s = self.spending()
        if s.accountant != "zcdp":
            raise InvalidSetting("dpsql.rho needs zCDP accounting; this budget is kept under basic composition, "
                                 "which charges epsilon: SET dpsql.epsilon")
        floor = self.policy.defaults.rho_floor
        if rho < floor:
            raise InvalidSetting(f"dpsql.rho {rho:g} is below the policy's minimum {floor:g} per query: every answer "
                                 "also reveals a little that is not noised (such as its run time), so the number of "
                                 "queries one budget buys is bounded")
        if rho > s.rho_total:
            raise InvalidSetting(f"dpsql.rho {rho:g} exceeds what the lifetime budget allows ({s.rho_total:.6g})")
        if rho > s.rho_remaining:
            raise InvalidSetting(f"dpsql.rho {rho:g} exceeds the remaining budget (rho {s.rho_remaining:.6g})")
        return rho

    def _reset(self, name: str) -> Result:
        d = self.policy.defaults
        if name == "all":
            self.epsilon, self.delta, self.mechanism = d.epsilon, d.delta, d.mechanism
            self.rho, self.plan_queries = self._default_rho(), 0
            self.intervals = self.round = False
            self.topk = "off"
        elif name == "dpsql.epsilon":
            self.epsilon, self.rho = d.epsilon, self._default_rho()
        elif name == "dpsql.rho":
            self.rho = self._default_rho()
        elif name == "dpsql.plan_queries":
            self.plan_queries = 0
        elif name in ("dpsql.intervals", "dpsql.round"):
            setattr(self, name[len("dpsql."):], False)
        elif name == "dpsql.topk":
            self.topk = "off"
        elif name == "dpsql.delta":
            self.delta = d.delta
        elif name == "dpsql.mechanism":
            self.mechanism = d.mechanism
        else:
            raise QueryRejected(f"RESET {name}", "only dpsql settings can be reset")
        return Result([], [], [], "set", tag="RESET")

    def cancel(self) -> None:
        """Cancel the running statement (from another thread or a signal handler). A charge
        already made stays made; nothing is released.

        A cancel that arrives before the engine has started the query (which an engine's
        interrupt would miss) is kept for the statement: it is checked before the charge (then
        nothing is charged) and again before the answer is released. It never shortens the
        release time ([timing]): a cancelled answer is refused at the time it would have been
        released, so the moment of the refusal says nothing about how long the query ran."""
        self._cancelled.set()
        self.engine.interrupt()

    def spending(self) -> Spending:
        b = self.budget
        return self.ledger.spending(self.analyst, epsilon_total=b.epsilon, delta_total=b.delta,
                                    accountant=b.accountant)

    SETTINGS: Mapping[str, str] = {      # name -> description, for SHOW ALL (the proxy) and the documentation
        "dpsql.epsilon": "epsilon each following query is charged (NULL while dpsql.rho calibrates them)",
        "dpsql.rho": "zCDP cost each following query is calibrated to (zCDP accounting only)",
        "dpsql.delta": "delta for the Gaussian mechanism and partition selection",
        "dpsql.mechanism": "noise mechanism: laplace, gaussian (analytic) or gaussian_classic",
        "dpsql.plan_queries": "EXPLAIN DP also plans a series of this many such queries (0: off)",
        "dpsql.intervals": "on: each noisy column c is followed by c_low and c_high, its 95% interval",
        "dpsql.round": "on: noisy counts as whole numbers, negative ones clamped to 0 (post-processing)",
        "dpsql.topk": "noisy_max: GROUP BY ... ORDER BY COUNT/SUM LIMIT k releases the top k keys chosen by "
                      "report-noisy-max (scores at the per-group sensitivity), off: every group's noisy value",
        "dpsql.accountant": "how the budget is kept: zcdp or basic (fixed by the policy)",
        "dpsql.analyst": "whose budget is charged (fixed at login)",
    }

    def settings(self) -> list[tuple[str, str | None, str]]:
        """Every dpsql setting as (name, value as text, description), for SHOW ALL."""
        out = []
        for name, description in self.SETTINGS.items():
            v = self._show(name).rows[0][0]
            out.append((name, None if v is None else (f"{v:g}" if isinstance(v, float) else str(v)), description))
        return out

    def _show(self, name: str) -> Result:
        if name == "all":
            rows = self.settings()
            return Result(["name", "setting", "description"], ["string"] * 3, rows, "show", [None] * 3,
                          [(None,) * 3 for _ in rows], tag="SHOW", db_types=["VARCHAR"] * 3)
        if name == "dpsql.budget":
            s = self.spending()
            cols = ["analyst", "epsilon_spent", "epsilon_remaining", "delta_spent", "delta_remaining",
                    "rho_spent", "rho_remaining", "accountant"]
            row = (self.analyst, s.epsilon_spent, s.epsilon_remaining, s.delta_spent, s.delta_remaining,
                   s.rho_spent, s.rho_remaining, s.accountant)
            n = len(cols)
            return Result(cols, ["string"] + ["number"] * 6 + ["string"], [row], "show", [None] * n, [(None,) * n],
                          tag="SHOW", db_types=["VARCHAR"] + ["DOUBLE"] * 6 + ["VARCHAR"])
        values = {"dpsql.epsilon": self.epsilon, "dpsql.delta": self.delta, "dpsql.mechanism": self.mechanism,
                  "dpsql.analyst": self.analyst, "dpsql.rho": self.rho, "dpsql.plan_queries": self.plan_queries,
                  "dpsql.accountant": None, "dpsql.intervals": "on" if self.intervals else "off",
                  "dpsql.round": "on" if self.round else "off", "dpsql.topk": self.topk}
        if name not in values:
            raise QueryRejected(f"SHOW {name}", "dpsql shows dpsql.budget, dpsql.epsilon, dpsql.rho, dpsql.delta, "
                                "dpsql.mechanism, dpsql.plan_queries, dpsql.intervals, dpsql.round, "
                                "dpsql.topk, dpsql.accountant and dpsql.analyst")
        if name == "dpsql.epsilon" and self.rho is not None:
            v = None                           # rho calibrates the queries now, not epsilon
        else:
            v = self.spending().accountant if name == "dpsql.accountant" else values[name]
        col = name.split(".", 1)[1]
        number = isinstance(v, (int, float)) or name in ("dpsql.rho", "dpsql.epsilon")
        return Result([col], ["number" if number else "string"], [(v,)], "show", [None], [(None,)],
                      tag="SHOW", db_types=["DOUBLE" if number else "VARCHAR"])


def read_schema(policy: Policy, engine: Engine, *, check_types: bool = True) -> Schema:
    """What the engine says about the policy's tables, checked against the policy: each protected
    table's columns and types, whether its unit is unique (PRIMARY KEY/UNIQUE) and NOT NULL, the
    public tables' columns and keys, and every fact read (Schema.facts) so that each query can
    check the ones it relies on again in its own transaction (Engine.run's expect); the base
    tables and views analysts' public queries are checked against."""
    refs = {t.name: t.source or t.name for t in policy.tables.values()}
    base = engine.base_tables()
    public = sorted(n for n in base if policy.is_public(n))
    facts = engine.facts(list(dict.fromkeys(list(refs.values()) + public)))

    def columns(name: str) -> dict[str, str]:
        if name not in facts:
            raise KeyError(name)
        return dict(facts[name].columns)

    _declared_file_types(policy, getattr(engine, "guessed", frozenset()), refs, public)
    policy.check_schema(columns)
    cols, unique, not_null = {}, set(), set()
    for t in policy.tables.values():
        f = facts[refs[t.name]]
        cols[t.name] = dict(f.columns)
        if t.privacy_unit in f.unique:
            unique.add(t.name)
        if t.privacy_unit in f.not_null:
            not_null.add(t.name)
    kept = {ref: facts[ref] for ref in list(refs.values()) + public if ref in facts}
    schema = Schema(cols, frozenset(unique), frozenset(base), frozenset(engine.views()), frozenset(not_null),
                    facts=kept, public={n: dict(facts[n].columns) for n in public if n in facts},
                    namespace=engine.namespace() if hasattr(engine, "namespace") else None)
    problems = check_policy_types(policy, schema) if check_types else []
    if problems:
        key, _, problem = problems[0].partition(": ")
        raise policy.problem(key, problem)       # with its line in the policy file
    return schema


def _declared_file_types(policy: Policy, guessed: frozenset[str], refs: Mapping[str, str],
                         public: list[str]) -> None:
    """Refuse a policy that shows an analyst a table the engine read from a file with types it
    guessed from the values: those types are read for free, so they must be the policy's
    (dpsql.filetypes argues it)."""
    why = ("is read from a file without declared column types: its types would be guessed from the values, "
           "and one person's value (52000.5, N/A) could change a type that every analyst reads for free. "
           "List each column and its type under [{key}] (`dpsql init FILE` writes them from the file)")
    for t in policy.tables.values():
        if refs[t.name] in guessed:
            raise policy.problem(f"tables.{t.name}", f"{t.name!r} " + why.format(key=f"tables.{t.name}.types"))
    for name in public:
        if name in guessed:
            raise policy.problem("public.tables",
                                 f"the public table {name!r} " + why.format(key=f"public.types.{name}"))


def release_delay(start: float, timing) -> None:
    """Sleep until the answer may be released: at least timing.floor seconds after `start`, and
    then at the next whole multiple of timing.quantum seconds after it.

    Run time is released with every answer and carries no noise. Work that depends on the data
    is kept small by construction (no statistics-based pruning: dpsql.rewrite.rows),
    and what remains is hidden here: a query that finishes before the floor is released at the
    floor exactly, whatever its data; a longer one at a multiple of the quantum, so that only a
    difference that moves it across a multiple shows. This is Haeberlen, Pierce & Narayan's
    predictable query time ("Differential Privacy Under Fire", USENIX Security 2011) in its
    simplest form; the README's threat model states the residual channel."""
    if timing.quantum <= 0 and timing.floor <= 0:
        return
    elapsed = time.monotonic() - start
    target = elapsed
    if timing.quantum > 0:
        target = math.ceil(elapsed / timing.quantum) * timing.quantum
    target = max(target, timing.floor)
    while (left := target - (time.monotonic() - start)) > 0:
        time.sleep(left)


def _explain_result(rows: list[tuple], form: str | None = "facts", dialect: str | None = None) -> Result:
    """EXPLAIN DP's rows in its form (dpsql.explain: facts, sql or wide)."""
    form = form or "facts"
    cols, types = explain.columns(form), explain.types(form)
    rows = explain.shaped(rows, form, dialect)
    n = len(cols)
    return Result(list(cols), list(types), rows, "explain", [None] * n,
                  [(None,) * n for _ in rows], tag="EXPLAIN",
                  db_types=["DOUBLE" if t == "number" else "VARCHAR" for t in types])


def _key_order(key: tuple) -> tuple:
    """A total order on released group keys: NULL last, then by type, NaN after every number;
    never raises (Decimal NaN would, in a comparison)."""
    out = []
    for v in key:
        if v is None:
            out.append((1, "", 0, 0))
        elif isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            nan = v.is_nan() if isinstance(v, Decimal) else (isinstance(v, float) and math.isnan(v))
            out.append((0, "number", 1 if nan else 0, 0 if nan else v))
        else:
            out.append((0, type(v).__name__, 0, v))
    return tuple(out)


_OUTSIDE = object()


def _domain_lookup(domain: tuple, sql_type: str):
    """Text of a key (as the engine prints it) -> the public domain's value, or _OUTSIDE.

    Integers print alike on every engine. A text key reaches this only through the engine's own
    `key IN (domain)`, so it equals a domain value by the engine's comparison; the only way its
    text can differ from that value is CHAR(n)'s blank padding: Spark pads CHAR(n) on read and
    compares with padding, yet reports the column as a plain string, so the column's type cannot
    tell. A text key is therefore looked up as it is, then without trailing blanks (a VARCHAR key
    with blanks matched its domain value exactly, so the second lookup never moves it). A boolean
    prints as true/false on every engine (CAST(b AS TEXT))."""
    table = {("true" if v else "false") if isinstance(v, bool) else str(v): v for v in domain}
    pad = family(sql_type) == "text"

    def look(text):
        if text is None:            # a LEFT JOIN's NULL key is a value of a public table's domain
            return None if None in domain else _OUTSIDE
        v = table.get(text, _OUTSIDE)
        if v is _OUTSIDE and pad:
            v = table.get(text.rstrip(" "), _OUTSIDE)
        return v
    return look


_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([+-]\d{2}(:?\d{2})?)?")


def _typed_key(text: str | None, sql_type: str) -> Any:
    """A released key's value from its text, in the column's Python type where it has one.

    Never raises: a value Python cannot hold (a date 'infinity', a year past 9999 or BC, a
    nanosecond timestamp) stays the engine's text.

    A group's text is that of whichever of its rows the engine met first, and equal values can
    print differently: -0.0 and 0.0 are one group (DuckDB and PostgreSQL print the first seen),
    and so are 1.0 and 1.00 in a PostgreSQL NUMERIC without a declared scale. The released key
    would then show whether someone's row holds -0.0 or 1.00, which partition selection does not
    cover (the group is released either way). So a released key is a function of the group's
    value alone: floats are canonical (-0.0 + 0.0 is 0.0; NaN and infinities are unchanged),
    and a NUMERIC of free scale loses its trailing fractional zeros (PostgreSQL's trim_scale)."""
    if text is None:
        return None
    fam = family(sql_type)
    try:
        if fam == "int":
            return int(text)
        if fam == "decimal":
            if "(" not in sql_type and "." in text and "e" not in text.lower():   # free scale: its own
                text = text.rstrip("0").rstrip(".")                              # (text: exact, no rounding)
            return Decimal(text)
        if fam == "float":
            return float(text) + 0.0
        if fam == "bool":
            low = text.strip().lower()
            return True if low in ("true", "t") else False if low in ("false", "f") else text
        if fam == "date" and _DATE_TEXT.fullmatch(text):
            return _dt.date.fromisoformat(text)
        if fam == "timestamp" and _TIMESTAMP_TEXT.fullmatch(text):
            frac = re.search(r"\.(\d+)", text)
            if frac and len(frac.group(1)) > 6:
                return text
            return _dt.datetime.fromisoformat(text.replace("T", " "))
    except (ValueError, ArithmeticError, OverflowError):
        return text
    return text


def _quantile_mechanisms(plan: QueryPlan) -> dict:
    """The exponential mechanism of each quantile (dpsql.noise.exponential), at its NoiseSpec's epsilon
    share, with rank sensitivity each unit's per-group row bound, over the plan's L0 groups."""
    specs = {spec.target: spec for spec in plan.noise}
    return {q.name: QuantileEM(specs[q.name].epsilon, q.q, q.lo, q.hi, int(specs[q.name].linf), plan.l0, q.bins)
            for q in plan.quantiles}


def _widest(accuracy: list, widths: list[tuple]) -> list:
    """A derived column's accuracy (AVG, VARIANCE, arithmetic): the widest 95% half-width among
    its released values (each value's own is in Result.half_widths), None if one is unbounded."""
    out = []
    for i, a in enumerate(accuracy):
        if a is not None and a.ci95 is None and widths:
            col = [w[i] for w in widths]
            if all(w is not None for w in col):
                a = Accuracy(a.mechanism, None, max(col))
        out.append(a)
    return out


def _output_names(plan: QueryPlan) -> list[str]:
    """The released columns' names: the outermost query's."""
    if plan.wraps:
        return [name for name, _ in plan.wraps[-1].outputs] if not plan.names else list(plan.names)
    return [o.name for o in plan.outputs]


def _float_setting(name: str, value: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidSetting(f"{name} must be a number") from None
    if not math.isfinite(v):
        raise InvalidSetting(f"{name} must be finite")
    return v


def _bool_setting(name: str, value: str) -> bool:
    """A boolean setting as PostgreSQL spells one: on/off, true/false, yes/no, 1/0."""
    v = str(value).strip().strip("'\"").lower()
    if v in ("on", "true", "yes", "1", "t", "y"):
        return True
    if v in ("off", "false", "no", "0", "f", "n"):
        return False
    raise InvalidSetting(f"{name} must be on or off")


def _type_name(sql_type: str) -> str:
    fam = family(sql_type)
    return {"int": "number", "float": "number", "decimal": "number", "text": "string", "bool": "boolean",
            "date": "date", "timestamp": "timestamp"}.get(fam, "string")


def _audit_path(policy: Policy) -> Path:
    """The audit log: [reconstruction] audit_log, else beside the ledger (LEDGER.audit.jsonl)."""
    if policy.reconstruction.audit_log is not None:
        return policy.reconstruction.audit_log
    ledger = _ledger_path(policy)
    return ledger.with_name(ledger.stem + ".audit.jsonl")


def _ledger_path(policy: Policy) -> Path:
    if policy.budget.ledger is not None:
        return policy.budget.ledger
    if policy.source == "<dict>":
        raise PolicyError("policy <dict>: budget.ledger: missing: a policy given as a dict must name its ledger file")
    p = Path(policy.source)
    return p.with_name(p.stem + ".ledger.sqlite")


class Backend:
    """One database and one policy shared by many sessions (the proxy: one Session per client).

    The engine is opened and the schema read once; each session gets its own engine connection
    (``engine.clone()``, so one client's cancel or slow query does not touch another's) and its own
    ledger connection (the ledger file serialises charges across all of them).
    """

    def __init__(self, target: Any, policy: Any, **engine_options: Any):
        if target is None:
            db, demo_policy, _ = Session.demo()
            target, policy = str(db), policy or str(demo_policy)
        if policy is None:
            raise InterfaceError("a policy is needed: a TOML file path or a dict")
        self.policy = load_policy(policy)
        self.target = target
        self.engine = open_engine(target, sources=path_sources(self.policy), types=self.policy.file_types(),
                                  **engine_options)
        self._lock = threading.Lock()
        self.plans = PlanCache(_SHARED_PLAN_CACHE)     # shared by the sessions (keys carry the analyst)
        try:
            self.schema = read_schema(self.policy, self.engine)
        except BaseException:
            self.engine.close()
            raise

    def session(self, analyst: str, *, rng=None) -> Session:
        """A new Session for an analyst, on its own engine connection."""
        clone = getattr(self.engine, "clone", None)
        with self._lock:
            engine = clone() if clone is not None else self.engine
        try:
            return Session(engine, self.policy, analyst, rng=rng, own_engine=clone is not None,
                           schema=self.schema, on_schema=self._schema_read, plans=self.plans)
        except BaseException:
            if clone is not None:
                engine.close()
            raise

    def _schema_read(self, schema: Schema) -> None:
        """A session found the schema changed and read it again: later sessions start from it."""
        self.schema = schema

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _laplace(sensitivity: float, epsilon: float, value, rng) -> float:
    """value + Laplace(sensitivity / epsilon) noise, by the exact sampler (for AboveThreshold)."""
    return make_mechanism("laplace", sensitivity, epsilon, 0.0).release(Fraction(value), rng)


def _is_count(plan: QueryPlan, name: str) -> bool:
    """Whether the released value `name` is a Count measure (not a sum, quantile or distinct count)."""
    return any(isinstance(m, Count) and m.name == name for m in plan.measures)
