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

import datetime as _dt
import itertools
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

from dpsql import explain, postprocess
from dpsql.analysis.analyze import PublicQuery, Schema, Settings, analyze, check_policy_types, family
from dpsql.analysis.parse import Statement, classify
from dpsql.analysis.plan import QueryPlan
from dpsql.cost import Cost
from dpsql.engines.base import Engine, open_engine
from dpsql.errors import (BudgetExhausted, Error, InterfaceError, InternalError,
                          InvalidSetting, PolicyError, QueryRejected)
from dpsql.analysis.reconstruction import auto_cap, population_key
from dpsql.guard import AuditLog, answer_key, decode, encode
from dpsql.ledger import Ledger, Spending, SubsetCharge
from dpsql.noise import SecureRng, make_mechanism
from dpsql.policy import MECHANISMS, Policy, load_policy
from dpsql.rewrite import SALT, to_sql

log = logging.getLogger("dpsql")

_ANALYST = re.compile(r"^[\w.@+-]{1,128}$")


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How noisy one released column is.

    noise_scale: the mechanism's scale (Laplace b or Gaussian sigma) for a column that
    is one noisy aggregate; None for derived columns (AVG, arithmetic), whose
    per-value 95% half-widths are in Result.half_widths.
    ci95: the 95% confidence half-width of a plain aggregate (the same for every row).
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

    @property
    def status(self) -> str:
        """One line for people: what it cost and what is left."""
        if self.cost is None or self.spending is None:
            return self.tag
        s = self.spending
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
                + f"; remaining epsilon {s.epsilon_remaining:g}, delta {s.delta_remaining:g}")


class Session:
    """One analyst's connection: the pipeline and its settings."""

    def __init__(self, engine: Engine, policy: Policy, analyst: str, *, rng=None,
                 ledger: Ledger | None = None, own_engine: bool = True, schema: Schema | None = None):
        if not isinstance(analyst, str) or not _ANALYST.match(analyst):
            raise InterfaceError("analyst must be a name of 1-128 letters, digits or . _ @ + -")
        self.engine, self.policy, self.analyst = engine, policy, analyst
        self.budget = policy.budget_for(analyst)
        self.rng = rng or SecureRng()
        self._own_engine = own_engine
        self._closed = False
        self._lock = threading.RLock()
        self.schema = schema if schema is not None else self._read_schema()
        if ledger is None:
            ledger = Ledger(_ledger_path(policy))
        self.ledger = ledger
        self.audit = AuditLog(_audit_path(policy))
        d = policy.defaults
        self.epsilon, self.delta, self.mechanism = d.epsilon, d.delta, d.mechanism

    @staticmethod
    def demo() -> tuple[Path, Path, str]:
        """The bundled demo's database, policy and analyst (created on first use)."""
        from dpsql.demo import DEMO_ANALYST, ensure_demo
        db, policy = ensure_demo()
        return db, policy, DEMO_ANALYST

    @classmethod
    def open(cls, target: Any, policy: Any, analyst: str | None, *, rng=None, **engine_options: Any) -> "Session":
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
        engine = open_engine(target, **engine_options)
        try:
            return cls(engine, pol, analyst, rng=rng)
        except BaseException:
            engine.close()
            raise

    def _read_schema(self) -> Schema:
        pol = self.policy
        cols: dict[str, dict[str, str]] = {}
        unique, not_null = set(), set()

        def columns(name: str) -> dict[str, str]:
            return self.engine.table_columns(name)

        pol.check_schema(columns)
        for t in pol.tables.values():
            cols[t.name] = columns(t.source or t.name)
            if t.privacy_unit in self.engine.unique_columns(t.source or t.name):
                unique.add(t.name)
            if t.privacy_unit in self.engine.not_null_columns(t.source or t.name):
                not_null.add(t.name)
        schema = Schema(cols, frozenset(unique), frozenset(self.engine.base_tables()),
                        frozenset(self.engine.views()), frozenset(not_null))
        problems = check_policy_types(pol, schema)
        if problems:
            raise PolicyError(f"policy {pol.source}: {problems[0]}")
        return schema

    # -- context management
    def __enter__(self) -> "Session":
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
            stmt = classify(sql, params, self.engine.dialect)
            try:
                return self._dispatch(stmt)
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
                return _explain_public(planned)
            return self._explain(planned)
        if isinstance(planned, PublicQuery):
            return self._run_public(planned)
        return self._run_private(planned)

    def _analyze(self, stmt: Statement) -> QueryPlan | PublicQuery:
        settings = Settings(self.epsilon, self.delta, self.mechanism)
        return analyze(stmt.tree, self.policy, self.schema, settings, self.engine.dialect)

    def plan(self, sql: str) -> QueryPlan | PublicQuery:
        """Analyse a query without running or charging it (for tools and tests)."""
        stmt = classify(sql, None, self.engine.dialect)
        if stmt.kind not in ("query", "explain"):
            raise QueryRejected("a command", "only queries have plans")
        return self._analyze(stmt)

    def _mechanisms(self, plan: QueryPlan):
        mechs = {spec.target: make_mechanism(spec.mechanism, spec.sensitivity, spec.epsilon, spec.delta)
                 for spec in plan.noise}
        sel = None
        if plan.selection_noise is not None:
            s = plan.selection_noise
            sel = make_mechanism("laplace", s.l1, s.epsilon, 0.0)
        return mechs, sel

    def _run_public(self, q: PublicQuery) -> Result:
        rows = self.engine.run(q.sql)
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
        sql = to_sql(plan, self.engine.dialect)
        mechs, sel = self._mechanisms(plan)
        params = {"values": [dict(mechs[m.name].params(), measure=m.label) for m in plan.measures]}
        if sel is not None:
            params["partition_selection"] = dict(sel.params(), threshold=plan.selection.threshold,
                                                 delta=plan.selection.delta, l0=plan.selection.l0)
        params["bounding"] = {"bounded": plan.bounded, "l0": plan.l0,
                              "max_rows_per_unit": plan.table.max_rows_per_unit if plan.bounded else 1}
        charged, surcharge, subset = self._charge_of(plan)
        if subset is not None:
            params["subset_selection"] = {"population": subset.population, "surcharge": recon.surcharge}
        b = self.budget
        # Charge first: if this raises, nothing has run and nothing is released.
        try:
            self.ledger.charge(self.analyst, charged.epsilon, charged.delta, epsilon_total=b.epsilon,
                               delta_total=b.delta, mechanism=plan.mechanism, params=params, query=plan.text,
                               subset=subset)
        except (QueryRejected, BudgetExhausted) as err:
            if subset is not None:
                self._audit("subset_refused", plan, charged=charged, subset=subset, reason=err.sqlstate)
            raise
        if subset is not None:     # audited before anything runs: an unaudited answer is never released
            self._audit("subset_charged", plan, charged=charged, subset=subset, surcharge=surcharge)
        bind = {SALT: self.rng.randbits(63)} if plan.group_choice else None
        rows = self.engine.run(sql, bind)
        table = self._noise(plan, rows.rows, mechs, sel)
        spending = self.ledger.spending(self.analyst, epsilon_total=b.epsilon, delta_total=b.delta)
        db_types = self._db_types(plan)
        accuracy = [self._accuracy(o, mechs) for o in plan.outputs]
        rows, widths, cut = table.rows, table.widths, 0
        limit = self.policy.limits.max_released_rows
        if len(rows) > limit:       # partition selection released more groups than the policy allows
            rows, widths, cut = rows[:limit], widths[:limit], len(rows) - limit
        result = Result(table.columns, [_type_name(t) for t in db_types], rows, "private", accuracy,
                        widths, charged, spending, tag=f"SELECT {len(rows)}", db_types=db_types,
                        surcharge=surcharge, truncated=cut)
        if key is not None:
            self.ledger.remember(self.analyst, key, self._to_cache(result), recon.cache_lifetime,
                                 self.policy.limits.max_cached_bytes)
        return result

    # -- the reconstruction defence: surcharge, cap, cache, audit (dpsql.analysis.reconstruction, dpsql.guard)
    def _answer_key(self, plan: QueryPlan) -> str:
        return answer_key(str(getattr(self.engine, "name", type(self.engine).__name__)), plan.text,
                          plan.cost.epsilon, plan.cost.delta, plan.mechanism)

    def _charge_of(self, plan: QueryPlan) -> tuple[Cost, float, SubsetCharge | None]:
        """What a query is charged: its cost, plus the policy's surcharge (a fraction of its epsilon)
        when it selects people by identity; and the subset series it joins, if any."""
        if plan.subset is None or not plan.subset.flagged:
            return plan.cost, 0.0, None
        recon = self.policy.reconstruction
        surcharge = plan.cost.epsilon * recon.surcharge
        cap = recon.max_subset_queries if recon.max_subset_queries is not None else auto_cap
        population = population_key(plan.table.name, tuple(m.label for m in plan.measures), plan.subset)
        return (Cost(plan.cost.epsilon + surcharge, plan.cost.delta), surcharge,
                SubsetCharge(population, plan.subset.named, cap))

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

        Group keys arrive as text (dpsql.rewrite.partitions.key_text). Nothing here can fail on
        a key's value: public-domain keys are looked up in their domain, and selected keys are
        turned into typed values only once released, by _typed_key, which never raises."""
        nk, measures = len(plan.keys), plan.measures
        types = [self.schema.columns.get(plan.table.name, {}).get(k.column, "") for k in plan.keys]
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
            groups = {key: found.get(key, zero) for key in domain}
        elif not plan.keys:
            groups = groups or {(): (0,) * len(measures)}
        widths = {m.name: mechs[m.name].half_width() for m in measures}
        released = []
        for key, values in groups.items():
            if sel is not None:
                units = values[len(measures)] or 0
                if sel.release(units, self.rng) <= plan.selection.threshold:
                    continue
                key = tuple(_typed_key(t, ty) for t, ty in zip(key, types))
            env = {}
            for m, v in zip(measures, values):
                exact = Fraction(0 if v is None else v)       # ints and Decimals: exact
                env[m.name] = mechs[m.name].release(exact / m.divisor, self.rng)
            released.append((key, env, widths))
        if sel is not None:
            # Selected groups: the engine's row order depends on the data (hash tables,
            # threads), so release them in an order fixed by the keys alone (a total order).
            released.sort(key=lambda g: _key_order(g[0]))
        outputs = [(o.name, o.expr, o.noisy) for o in plan.outputs]
        return postprocess.finish(released, outputs, plan.having, plan.order, plan.limit, plan.offset)

    def _db_types(self, plan: QueryPlan) -> list[str]:
        """The SQL type of each output: noisy values are DOUBLE; group keys keep their column's type."""
        out = []
        for o in plan.outputs:
            if o.noisy:
                out.append("DOUBLE")
            elif o.expr[0] == "key":
                out.append(self.schema.columns[plan.table.name].get(plan.keys[o.expr[1]].column, "VARCHAR"))
            else:
                out.append("VARCHAR")
        return out

    # -- for front ends that describe before they execute (the wire protocol's Describe)
    def describe(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
                 ) -> tuple[list[str], list[str]]:
        """Result column names and SQL types of a statement, without running or charging it.

        Raises what execute would raise for a statement outside the subset. Commands (SET, ...)
        have no columns, except SHOW."""
        if self._closed:
            raise InterfaceError("the session is closed")
        with self._lock:
            stmt = classify(sql, params, self.engine.dialect)
            if stmt.kind in ("empty", "set", "reset"):
                return [], []
            if stmt.kind == "show":
                r = self._show(stmt.name)
                return r.columns, ["DOUBLE" if t == "number" else "VARCHAR" for t in r.types]
            planned = self._analyze(stmt)
            if stmt.kind == "explain":
                return list(explain.COLUMNS), ["DOUBLE" if t == "number" else "VARCHAR" for t in explain.TYPES]
            if isinstance(planned, PublicQuery):
                rows = self.engine.run(f"SELECT * FROM ({planned.sql}) AS q LIMIT 0")
                return list(rows.columns), list(rows.types)
            return [o.name for o in planned.outputs], self._db_types(planned)

    def tables(self) -> dict[str, dict[str, str]]:
        """What an analyst may see of the schema: each protected table (by its policy name) and each
        public base table, with its columns and their SQL types. No rows, no statistics."""
        out = {name: dict(cols) for name, cols in self.schema.columns.items()}
        hidden = {t.source.lower() for t in self.policy.tables.values() if t.source}
        for name in sorted(self.schema.base_tables - hidden - set(out)):
            try:
                out[name] = self.engine.table_columns(name)
            except KeyError:
                continue
        return out

    @staticmethod
    def _accuracy(output, mechs) -> Accuracy | None:
        if not output.noisy:
            return None
        if output.expr[0] == "ref":
            m = mechs[output.expr[1]]
            return Accuracy(m.name, m.scale, m.half_width())
        names = _refs(output.expr)
        kinds = {mechs[n].name for n in names}
        return Accuracy(kinds.pop() if len(kinds) == 1 else "mixed", None, None)

    # -- EXPLAIN DP
    def _explain(self, plan: QueryPlan) -> Result:
        mechs, sel = self._mechanisms(plan)
        charged, surcharge, subset = self._charge_of(plan)
        recon = self.policy.reconstruction
        cached = recon.cache_lifetime > 0 and self.ledger.cached(
            self.analyst, self._answer_key(plan), recon.cache_lifetime) is not None
        series = self.ledger.subset_state(self.analyst, subset) if subset is not None else None
        rows = explain.private_rows(plan, to_sql(plan, self.engine.dialect), mechs, sel, charged=charged,
                                    surcharge=surcharge, recon=recon, cached=cached, series=series)
        return _explain_result(rows)

    # -- SET / RESET / SHOW
    def _set(self, name: str, value: str) -> Result:
        if not name.startswith("dpsql."):
            raise QueryRejected(f"SET {name}", "only dpsql.epsilon, dpsql.delta and dpsql.mechanism can be set",
                                "engine settings are fixed by the data owner")
        key = name[len("dpsql."):]
        if key == "epsilon":
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
            left = self.spending().epsilon_remaining
            if eps > left:
                raise InvalidSetting(f"dpsql.epsilon {eps:g} exceeds the remaining budget {left:g}")
            self.epsilon = eps
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
        elif key in ("analyst", "budget", "spent", "ledger", "policy"):
            raise QueryRejected(f"SET {name}", "the analyst, the budget and the spending are fixed by the policy")
        else:
            raise InvalidSetting(f"unknown setting {name}; settable: dpsql.epsilon, dpsql.delta, dpsql.mechanism")
        return Result([], [], [], "set", tag="SET")

    def _reset(self, name: str) -> Result:
        d = self.policy.defaults
        if name == "all":
            self.epsilon, self.delta, self.mechanism = d.epsilon, d.delta, d.mechanism
        elif name == "dpsql.epsilon":
            self.epsilon = d.epsilon
        elif name == "dpsql.delta":
            self.delta = d.delta
        elif name == "dpsql.mechanism":
            self.mechanism = d.mechanism
        else:
            raise QueryRejected(f"RESET {name}", "only dpsql settings can be reset")
        return Result([], [], [], "set", tag="RESET")

    def cancel(self) -> None:
        """Cancel the running query (from another thread or a signal handler). A charge
        already made stays made; nothing is released."""
        self.engine.interrupt()

    def spending(self) -> Spending:
        b = self.budget
        return self.ledger.spending(self.analyst, epsilon_total=b.epsilon, delta_total=b.delta)

    def _show(self, name: str) -> Result:
        if name == "dpsql.budget":
            s = self.spending()
            cols = ["analyst", "epsilon_spent", "epsilon_remaining", "delta_spent", "delta_remaining"]
            row = (self.analyst, s.epsilon_spent, s.epsilon_remaining, s.delta_spent, s.delta_remaining)
            return Result(cols, ["string"] + ["number"] * 4, [row], "show", [None] * 5, [(None,) * 5], tag="SHOW",
                          db_types=["VARCHAR"] + ["DOUBLE"] * 4)
        values = {"dpsql.epsilon": self.epsilon, "dpsql.delta": self.delta, "dpsql.mechanism": self.mechanism,
                  "dpsql.analyst": self.analyst}
        if name not in values:
            raise QueryRejected(f"SHOW {name}", "dpsql shows dpsql.budget, dpsql.epsilon, dpsql.delta, "
                                "dpsql.mechanism and dpsql.analyst")
        v = values[name]
        col = name.split(".", 1)[1]
        return Result([col], ["number" if isinstance(v, float) else "string"], [(v,)], "show", [None], [(None,)],
                      tag="SHOW", db_types=["DOUBLE" if isinstance(v, float) else "VARCHAR"])


def release_delay(start: float, timing) -> None:
    """Sleep until the answer may be released: at least timing.floor seconds after `start`, and
    then at the next whole multiple of timing.quantum seconds after it.

    Run time is released with every answer and carries no noise. Work that depends on the data
    is kept small by construction (no statistics-based pruning: dpsql.rewrite.contribution.hit),
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


def _explain_result(rows: list[tuple]) -> Result:
    n = len(explain.COLUMNS)
    return Result(list(explain.COLUMNS), list(explain.TYPES), rows, "explain", [None] * n,
                  [(None,) * n for _ in rows], tag="EXPLAIN",
                  db_types=["DOUBLE" if t == "number" else "VARCHAR" for t in explain.TYPES])


def _explain_public(q: PublicQuery) -> Result:
    return _explain_result(explain.public_rows(q.sql))


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
    Integers print alike on every engine; CHAR(n) may come back padded (Spark pads on read)."""
    table = {str(v): v for v in domain}
    pad = family(sql_type) == "text" and sql_type.lower().startswith(("char", "bpchar", "character")) \
        and "varying" not in sql_type.lower()

    def look(text):
        if text is None:
            return _OUTSIDE
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
    nanosecond timestamp) stays the engine's text."""
    if text is None:
        return None
    fam = family(sql_type)
    try:
        if fam == "int":
            return int(text)
        if fam == "decimal":
            return Decimal(text)
        if fam == "float":
            return float(text)
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


def _refs(expr: tuple) -> set[str]:
    if expr[0] == "ref":
        return {expr[1]}
    if expr[0] == "avg":
        return {expr[1], expr[2]}
    out: set[str] = set()
    for a in expr[1:]:
        if isinstance(a, tuple):
            out |= _refs(a)
    return out


def _float_setting(name: str, value: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidSetting(f"{name} must be a number") from None
    if not math.isfinite(v):
        raise InvalidSetting(f"{name} must be finite")
    return v


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
        self.engine = open_engine(target, **engine_options)
        self._lock = threading.Lock()
        try:
            probe = Session(self.engine, self.policy, "dpsql", own_engine=False,
                            ledger=_NoLedger())
            self.schema = probe.schema
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
                           schema=self.schema)
        except BaseException:
            if clone is not None:
                engine.close()
            raise

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _NoLedger:
    """Stands in for the ledger while Backend reads the schema (that probe never charges)."""

    def close(self) -> None:
        pass
