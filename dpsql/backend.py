"""A Backend: one database and one policy shared by many sessions (the proxy: one Session per
client), with one engine, one schema read and one plan cache between them."""
from __future__ import annotations

import threading
from typing import Any, Self

from dpsql.analysis.analyze import Schema
from dpsql.engines import open_engine, path_sources
from dpsql.errors import InterfaceError
from dpsql.planner import SHARED_PLAN_CACHE, PlanCache
from dpsql.policy import load_policy
from dpsql.session import Session
from dpsql.sources import read_schema


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
        self.plans = PlanCache(SHARED_PLAN_CACHE)     # shared by the sessions (keys carry the analyst)
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
