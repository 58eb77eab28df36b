"""Session: the one pipeline every front end shares.

    text -> parse -> plan (dpsql.planner -> dpsql.analysis: QueryPlan: sensitivity, mechanism, cost)
         -> rewrite                       [EXPLAIN DP stops here, charges nothing]
         -> charge (dpsql.charge, ledger) [BudgetExhausted: nothing runs, nothing released]
         -> engine.run (all work in the engine; one row per group)
         -> release (dpsql.release: partition selection, noise, accuracy) -> postprocess -> Result

A Session holds only the connection-level settings (dpsql.settings: epsilon, delta, mechanism for
the next queries) and its handles, and calls the stages; everything about one query lives in its plan.
Nothing an analyst can SET changes the analyst, the budget or what was spent.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from dpsql import charge, explain, planner, release
from dpsql.analysis.analyze import PublicQuery, Schema
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.parse import StatementKind as Kind
from dpsql.analysis.measures import SampleAggregate
from dpsql.analysis.plan import QueryPlan
from dpsql.demo import DEMO_ANALYST, ensure_demo
from dpsql.engines import Engine, TableFacts, open_engine, path_sources
from dpsql.errors import (
    Error,
    InterfaceError,
    InternalError,
    QueryCanceled,
    QueryRejected,
    SchemaChanged,
)
from dpsql.ledger import AuditLog, Cost, Ledger, Spending
from dpsql.noise import SecureRng
from dpsql.policy import Policy, load_policy
from dpsql.result import Result, ResultKind, explain_result, from_cache, to_cache, type_name
from dpsql.rewrite import SALT, to_sql
from dpsql.rewrite.quantiles import needs_salt
from dpsql.settings import Settings
from dpsql.sources import audit_path, expected, ledger_path, read_schema

log = logging.getLogger("dpsql")

_ANALYST = re.compile(r"^[\w.@+-]{1,128}$")


class Session:
    """One analyst's connection: its settings and handles; it calls the pipeline's stages."""

    def __init__(self, engine: Engine, policy: Policy, analyst: str, *, rng=None,
                 ledger: Ledger | None = None, own_engine: bool = True, schema: Schema | None = None,
                 on_schema=None, plans: planner.PlanCache | None = None):
        if not isinstance(analyst, str) or not _ANALYST.match(analyst):
            raise InterfaceError("analyst must be a name of 1-128 letters, digits or . _ @ + -")
        self.engine, self.policy, self.analyst = engine, policy, analyst
        self.budget = policy.budget_for(analyst)
        self.rng = rng or SecureRng()
        self._own_engine = own_engine
        self._closed = False
        self._lock = threading.RLock()
        self._cancelled = threading.Event()     # set by cancel() while a statement runs
        self._started = self._yielded = time.monotonic()    # statement start; check()'s last GIL release
        self.schema = schema if schema is not None else read_schema(policy, engine)
        self._on_schema = on_schema         # told of a re-read schema (Backend shares it with new sessions)
        self.ledger = ledger if ledger is not None else Ledger(ledger_path(policy))
        self.audit = AuditLog(audit_path(policy))
        self.config = Settings(policy, analyst, self.budget, self.ledger)   # SET/RESET/SHOW dpsql.*
        self._plans = plans if plans is not None else planner.PlanCache(planner.PLAN_CACHE)
        # defer_release: no [timing] sleep in execute(); release_pending tells dpsql serve to wait (client._hold)
        self.defer_release = self.release_pending = False

    @staticmethod
    def demo() -> tuple[Path, Path, str]:
        """The bundled demo's database, policy and analyst (created on first use)."""
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
                key = planner.plan_key(sql, repr(params) if params is not None else "", self._inputs(), self.analyst)
                planned = self._plans.get(key, self.schema)
                if planned is not None:
                    return self._run_planned(planned, lambda: classify(sql, params))
                return self._dispatch(classify(sql, params))
            except Error:
                raise
            except Exception as err:  # a dpsql bug: fail closed, nothing released
                log.exception("internal error")
                raise InternalError(f"internal error ({type(err).__name__}); nothing was released") from None

    def _dispatch(self, stmt: Statement) -> Result:
        if stmt.kind is Kind.EMPTY:
            return Result([], [], [], ResultKind.EMPTY, tag="EMPTY")
        if stmt.kind is Kind.SET:
            return self.config.set(stmt.name, stmt.value)
        if stmt.kind is Kind.RESET:
            return self.config.reset(stmt.name)
        if stmt.kind is Kind.SHOW:
            return self.config.show(stmt.name)
        planned = self._analyze(stmt)
        if stmt.kind is Kind.EXPLAIN:
            if isinstance(planned, PublicQuery):
                return explain_result(explain.public_rows(planned.sql), stmt.name, self.engine.dialect)
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
        return release.present(result, planned, self.config, self.check) if isinstance(planned, QueryPlan) else result

    def _run(self, planned: QueryPlan | PublicQuery) -> Result:
        return self._run_public(planned) if isinstance(planned, PublicQuery) else self._run_private(planned)

    def _refresh_schema(self) -> None:
        self.schema = read_schema(self.policy, self.engine)
        if self._on_schema is not None:
            self._on_schema(self.schema)

    def _expect(self, refs: Sequence[str], public: Sequence[str] = ()) -> dict[str, TableFacts]:
        return expected(self.schema, refs, public)

    def _inputs(self) -> planner.Inputs:
        """What the next plan is a function of: the policy, the schema and the settings now."""
        domain = planner.public_domain(self.engine, self._expect)   # made per call: a Session holds no cycle
        return planner.Inputs.of(self.config, self.policy, self.schema, self.engine.dialect, domain)

    def _analyze(self, stmt: Statement) -> QueryPlan | PublicQuery:
        """The statement's plan, kept (dpsql.planner.planned)."""
        return planner.planned(self._plans, stmt, self._inputs(), self.analyst)

    def _sql(self, plan: QueryPlan) -> str:
        """The rewrite of a plan in the engine's dialect, kept with the plan."""
        dialect = self.engine.dialect
        return self._plans.memo(plan, ("sql", dialect), lambda: to_sql(plan, dialect))

    def _mechanisms(self, plan: QueryPlan):
        """The plan's mechanisms (immutable, a function of the plan alone), kept with the plan."""
        return self._plans.memo(plan, ("mechanisms",), lambda: release.mechanisms_for(plan))

    def plan(self, sql: str, *, cached: bool = True) -> QueryPlan | PublicQuery:
        """Analyse a query without running or charging it (for tools and tests); cached=False
        plans it afresh even if the session keeps a plan for it."""
        stmt = classify(sql, None)
        if stmt.kind not in (Kind.QUERY, Kind.EXPLAIN):
            raise QueryRejected("a command", "only queries have plans")
        return self._analyze(stmt) if cached else planner.plan(stmt, self._inputs())

    def _run_public(self, q: PublicQuery) -> Result:
        rows = self.engine.run(q.sql, expect=self._expect((), q.tables))
        return Result(list(rows.columns), [type_name(t) for t in rows.types], rows.rows, ResultKind.PUBLIC,
                      accuracy=[None] * len(rows.columns),
                      half_widths=[(None,) * len(rows.columns) for _ in rows.rows],
                      tag=f"SELECT {len(rows.rows)}", db_types=list(rows.types))

    def _run_private(self, plan: QueryPlan) -> Result:
        """Answer a private query; released no earlier than the policy's [timing] allows."""
        start = time.monotonic()
        try:
            return self._answer(plan)
        finally:
            self.release_pending = self.defer_release         # then the front end waits (release_time)
            if not self.defer_release:
                release.release_delay(start, self.policy.timing)

    def _answer(self, plan: QueryPlan) -> Result:
        recon = self.policy.reconstruction
        key = self._answer_key(plan) if recon.cache_lifetime > 0 else None
        hit = self.ledger.cached(self.analyst, key, recon.cache_lifetime) if key else None
        if hit is not None:
            result = from_cache(hit, self.spending())
            if plan.subset is not None and plan.subset.flagged:
                self._audit("subset_repeat", plan, charged=Cost(0.0, 0.0))
            return result
        if plan.auto is not None and plan.auto.chosen is None:
            expect = self._expect([ref for _, ref in plan.tables])
            plan = planner.auto_bound(plan, self._inputs(), lambda sql: self.engine.run(sql, expect=expect).rows,
                                      self.rng)
        sql = self._sql(plan)
        mechs, sel = self._mechanisms(plan)
        parts = self._plans.memo(plan, ("charge",), lambda: charge.charge_parts(plan, self.policy, mechs, sel))
        after: list[Spending] = []          # the spending the charge's own transaction left

        def charge_first() -> None:
            """Charge first: called by the engine inside the query's transaction, after the schema
            facts are checked and before the query runs. If it raises, nothing runs and nothing
            is released."""
            if self._cancelled.is_set():
                raise QueryCanceled("canceling statement due to user request: the query was cancelled")
            after.append(charge.charge(self.ledger, self.analyst, self.budget, plan, parts, audit=self._audit,
                                       refused=lambda err: charge.what_fits(err, plan, self.policy, self.config)))
        salted = plan.group_choice or any(isinstance(m, SampleAggregate) for m in plan.measures) or needs_salt(plan)
        bind = {SALT: self.rng.randbits(63)} if salted else None
        rows = self.engine.run(sql, bind, expect=self._expect([ref for _, ref in plan.tables]), before=charge_first)
        # From here on the charge is recorded (charge_first() ran inside the engine's transaction)
        # and nothing is released until this function returns: a cancel or the statement time
        # limit, checked between batches of every stage below (check), ends the statement with
        # QueryCanceled, so a cancelled query releases nothing and its budget stays spent.
        self.check()
        result = release.answer(plan, rows.rows, mechs, sel, self.rng, max_rows=self.policy.limits.max_released_rows,
                                check=self.check, charged=parts[1], spending=after[0], surcharge=parts[2])
        self.check()
        if key is not None:
            self.ledger.remember(self.analyst, key, to_cache(result), recon.cache_lifetime,
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
        now = time.monotonic()
        if limit is not None and now - self._started > limit:
            raise QueryCanceled("canceling statement due to statement timeout: the query ran longer than "
                                "the engine's statement timeout")
        self._yielded = _let_others_run(self._yielded, now)

    # -- the reconstruction defence: surcharge, cap, cache, audit (dpsql.analysis.reconstruction, dpsql.ledger.answer_cache)
    def _answer_key(self, plan: QueryPlan) -> str:
        return charge.answer_key_of(plan, str(getattr(self.engine, "name", type(self.engine).__name__)))

    def _audit(self, event: str, plan: QueryPlan, **fields: Any) -> None:
        charge.audit(self.audit, self.ledger, self.analyst, event, plan, **fields)

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
            if stmt.kind in (Kind.EMPTY, Kind.SET, Kind.RESET):
                return [], []
            if stmt.kind is Kind.SHOW:
                r = self.config.show(stmt.name)
                return r.columns, ["DOUBLE" if t == "number" else "VARCHAR" for t in r.types]
            planned = self._analyze(stmt)
            if stmt.kind is Kind.EXPLAIN:
                return (list(explain.columns(stmt.name)),
                        ["DOUBLE" if t == "number" else "VARCHAR" for t in explain.types(stmt.name)])
            if isinstance(planned, PublicQuery):
                rows = self.engine.run(f"SELECT * FROM ({planned.sql}) AS q LIMIT 0")
                return list(rows.columns), list(rows.types)
            return release.describe(planned, self.config, self.check)

    def tables(self) -> dict[str, dict[str, str]]:
        """What an analyst may see of the schema: each protected table (by its policy name) and each
        base table the policy declares public, with its columns and their SQL types. No rows, no
        statistics; a table the policy does not mention is not listed."""
        out = {name: dict(cols) for name, cols in self.schema.columns.items()}
        for name in sorted(self.schema.public):
            out.setdefault(name, dict(self.schema.public[name]))
        return out

    # -- EXPLAIN DP
    def _explain(self, plan: QueryPlan, form: str | None = "facts") -> Result:
        recon = self.policy.reconstruction
        cached = recon.cache_lifetime > 0 and self.ledger.cached(
            self.analyst, self._answer_key(plan), recon.cache_lifetime) is not None
        rows = charge.explain_rows(plan, self._sql(plan), *self._mechanisms(plan), self.policy, ledger=self.ledger,
                                   analyst=self.analyst, budget=self.budget, plan_queries=self.config.plan_queries,
                                   cached=cached)
        return explain_result(rows, form, self.engine.dialect)

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
        return self.config.spending()

    def settings(self) -> list[tuple[str, str | None, str]]:
        """Every dpsql setting as (name, value as text, description), for SHOW ALL."""
        return self.config.all()


def release_time(session: Session, start: float) -> float:
    """For a Session with defer_release: when (time.monotonic()) a private answer ready now, of a
    statement begun at `start`, may be released under the policy's [timing] (release.release_at)."""
    return release.release_at(start, session.policy.timing)


def _let_others_run(last: float, now: float) -> float:
    """Release the GIL (time.sleep(0)) if it was last released a millisecond or more ago; returns
    when it was last released. Not at every check: time.sleep(0) is a real sleep of about 55 us
    on Linux (the timer slack), seven of them per small query, 0.4 ms of every answer."""
    if now - last < 0.001:
        return last
    time.sleep(0)
    return now
