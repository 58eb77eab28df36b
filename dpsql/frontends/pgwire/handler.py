"""What a statement means to dpsql: the application side of the protocol's `Run` and `Describe`.

The protocol (protocol.py) decides when a statement runs; `Handler` decides what answers it, in
a worker thread: the catalog emulation (catalog.py: driver introspection, SET/SHOW of server
settings, transaction commands) first, then the client's Session. This is the part the Rust
pgwire crate leaves to the application as `do_query`/`do_describe`.
"""
from __future__ import annotations

import datetime as _dt
import logging
from decimal import Decimal

from dpsql.errors import InternalError
from dpsql.frontends.pgwire.protocol import Answer
from dpsql.frontends.pgwire.statements import (
    DRIVER_SETTING_RE,
    StatementKind,
    mentions_dpsql,
    transaction_tag,
)
from dpsql.frontends.pgwire.types import pg_type
from dpsql.frontends.pgwire.values import FLOAT_OIDS, INT_OIDS, format_text
from dpsql.sqltext import strip_comments

log = logging.getLogger("dpsql.server")

_OWN_SETTINGS = (StatementKind.SET, StatementKind.RESET, StatementKind.DISCARD, StatementKind.SHOW)


class Handler:
    """One client's Session and catalog. `query` and `describe` run in worker threads;
    `cancel` may come from any thread."""

    def __init__(self, session, catalog=None):
        self.session, self.catalog = session, catalog
        # The release timing is the client's (client.Client._hold, on the event loop): the worker
        # thread and the query slot are free as soon as the answer is ready.
        if session is not None:
            session.defer_release = True
        self.hold = False        # the last statement was a private query: its release waits

    def tables(self) -> dict:
        """The analyst's tables' column types (for the types of parameters)."""
        return self.session.schema.columns if self.session is not None else {}

    def new_statement(self) -> None:
        self.hold = False
        if self.catalog is not None and hasattr(self.catalog, "new_statement"):
            self.catalog.new_statement()

    def query(self, sql: str, params: list | None, kind: StatementKind, session_sql: str) -> Answer:
        """The catalog's reply, else the Session's result, as an Answer."""
        if self.catalog is None:
            reply = _fallback(sql, kind)
            if reply is not None:
                return reply
        reply = self.catalog.answer(sql, _text_params(params)) if self.catalog is not None else None
        if reply is not None:
            if kind is StatementKind.DISCARD and reply.tag == "DISCARD ALL" and self.session is not None:
                self.session.config.reset_all()     # dpsql.epsilon/delta/mechanism back to the policy's
            cols = [(c.name, c.type_oid, c.type_size, c.type_modifier) for c in reply.columns]
            return Answer(cols, list(reply.rows), reply.tag, text_rows=True)
        session = self.session
        if session is None:
            raise InternalError("the session is closed")
        session.release_pending = False
        try:
            res = session.execute(session_sql, _mapping(params))
        finally:
            self.hold = session.release_pending     # answered or failed: released at its time
        if res.tag == "EMPTY":
            return Answer([], [], "", empty=True)
        types = res.db_types or ["VARCHAR"] * len(res.columns)
        cols = []
        for name, t in zip(res.columns, types):
            pt = pg_type(t)
            cols.append((name, pt.oid, pt.size, -1))
        notice = res.status if res.kind == "private" else None
        return Answer(cols, res.rows, res.tag or "SELECT 0", notice=notice)

    def describe(self, sql: str, session_sql: str, oids: list[int],
                 kind: StatementKind) -> list[tuple[str, int, int, int]]:
        if self.catalog is not None:
            cols = self.catalog.describe(sql)
            if cols is not None:
                return [(c.name, c.type_oid, c.type_size, c.type_modifier) for c in cols]
        if kind.transaction_control or kind is StatementKind.EMPTY:
            return []
        if self.catalog is not None and kind in _OWN_SETTINGS and not mentions_dpsql(sql):
            return []
        dummy = [_dummy(o) for o in oids] if oids else None
        names, types = self.session.describe(session_sql or sql, _mapping(dummy))
        out = []
        for n, t in zip(names, types):
            pt = pg_type(t)
            out.append((n, pt.oid, pt.size, -1))
        return out

    def cancel(self, label: object) -> None:
        """Stop the running statement, private (Session.cancel) or catalog (Catalog.cancel)."""
        for what in (self.catalog, self.session):
            cancel = getattr(what, "cancel", None)
            if cancel is not None:
                try:
                    cancel()
                except Exception:
                    log.exception("cancel on connection %s", label)

    def close(self) -> None:
        try:
            if self.catalog is not None and hasattr(self.catalog, "close"):
                self.catalog.close()
        finally:
            if self.session is not None:
                self.session.close()


def _fallback(sql: str, kind: StatementKind) -> Answer | None:
    """While the catalog layer is absent: transaction commands (every dpsql statement is a read
    charged at once, so there is nothing to commit) and the SETs drivers send on connecting."""
    if kind.transaction_control:
        return Answer([], [], transaction_tag(sql), text_rows=True)
    if kind is StatementKind.SET and DRIVER_SETTING_RE.match(strip_comments(sql)):
        return Answer([], [], "SET", text_rows=True)
    return None


def _mapping(params: list | None) -> dict | None:
    """Positional Bind values as the named parameters of named_params(): {"p1": v1, ...}."""
    if not params:
        return None
    return {f"p{i}": v for i, v in enumerate(params, 1)}


def _text_params(params: list | None) -> list[str | None] | None:
    if params is None:
        return None
    return [None if p is None else format_text(p) for p in params]


def _dummy(oid: int) -> object:
    if oid in INT_OIDS:
        return 0
    if oid in FLOAT_OIDS:
        return 0.0
    if oid == 1700:
        return Decimal(0)
    if oid == 16:
        return False
    if oid == 1082:
        return _dt.date(2000, 1, 1)
    if oid in (1114, 1184):
        return _dt.datetime(2000, 1, 1)
    return ""
