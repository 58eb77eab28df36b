"""The PostgreSQL v3 query protocol as a sans-IO state machine: messages in, bytes and actions out.

    conn = Connection(tables=lambda: session.schema.columns)
    out = conn.receive(codec.Query("SELECT 1"))      # [bytes, ..., Run(...)]
    out = conn.completed(run, Answer(...))           # the action's result: more bytes, maybe an action
    out = conn.failed(run, err)                      # or the error it raised

`Connection` owns what the protocol defines per connection: the transaction status reported in
ReadyForQuery (I idle, T in a block, E in a failed block), prepared statements and portals, the
discard-until-Sync after an error in the extended protocol, and the simple and extended query
flows (model: the Rust pgwire crate's `api/query.rs`, whose handlers own the protocol state and
leave `do_query`/`do_describe` to the application). It never reads a socket, runs a query or
sleeps: what needs the world comes out as an action, at most one and always last in the list,
and the caller reports its outcome with `completed()` or `failed()` before the next `receive()`.
The flows are written as generators that yield actions and receive their results, as psycopg 3's
`generators.py` are, so a statement's steps read in order. Tests drive it with tables of message
sequences and no socket (tests/proxy/test_protocol.py).

Actions: `Run` (one statement, through the catalog and the Session: handler.py), `Describe`
(a prepared statement's result columns), `SendRows` (DataRows of an answer, which the I/O layer
encodes in batches so that a large answer neither holds its event loop nor piles up, and between
which a cancel can stop it), `FLUSH` (send what is buffered now) and `DISCONNECT`.

Startup, TLS and SCRAM stay in the I/O layer (startup.py): they run before a Session exists,
and each of their steps is an I/O step (TLS is a socket upgrade, SCRAM a round trip per
message), so a machine would add states without taking any logic out of the I/O layer.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from dpsql.errors import (
    DuplicateCursor,
    DuplicatePreparedStatement,
    Error,
    InFailedTransaction,
    InvalidCursorName,
    InvalidSqlStatementName,
    ProtocolViolation,
)
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire import copy as _copy
from dpsql.frontends.pgwire.statements import (
    StatementKind,
    classify,
    deallocated,
    discards_all,
)
from dpsql.frontends.pgwire.values import decode_param
from dpsql.frontends.pgwire.types import infer_param_oids, named_params, param_count, strip_param_casts
from dpsql.sqltext import only_comments, split_statements

log = logging.getLogger("dpsql.server")


@dataclass
class Prepared:
    sql: str
    param_oids: list[int]
    session_sql: str = ""          # the text for the Session: `$n::type` casts dropped (see types.py)
    inferred: list[int] | None = None


@dataclass
class Portal:
    statement: Prepared
    params: list
    result_formats: tuple[int, ...]
    result: Answer | None = None   # once run
    position: int = 0
    notice_sent: bool = False


@dataclass
class Answer:
    """One statement's outcome in wire terms."""
    columns: list[tuple[str, int, int, int]]    # name, type oid, size, modifier
    rows: list[tuple]
    tag: str
    text_rows: bool = False                     # values already in PostgreSQL text (catalog replies)
    notice: str | None = None
    empty: bool = False


# -- actions ------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Run:
    """Run one statement (the catalog's reply, else the Session's result) -> an Answer."""
    sql: str
    params: list | None
    session_sql: str
    kind: StatementKind


@dataclass(frozen=True, eq=False)
class Describe:
    """A prepared statement's result columns -> [(name, type oid, size, modifier)]."""
    sql: str
    session_sql: str
    param_oids: list[int]
    kind: StatementKind


@dataclass(frozen=True, eq=False)
class SendRows:
    """DataRows for answer.rows[start:stop] in `fields`' types and formats -> None (or an error,
    such as QueryCanceled, after the rows sent so far)."""
    answer: Answer
    fields: list[codec.Field]
    start: int
    stop: int


class _Signal:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


FLUSH = _Signal("FLUSH")              # send what is buffered now
DISCONNECT = _Signal("DISCONNECT")    # end the connection (after sending what came before)

Action = Run | Describe | SendRows | _Signal
Out = bytes | Action
_Flow = Generator[Action, Any, None]


def error_fields(err: BaseException) -> dict[str, str]:
    if isinstance(err, Error):
        return dict(err.wire_fields())
    return {"S": "ERROR", "V": "ERROR", "C": "XX000",
            "M": f"internal error ({type(err).__name__}); nothing was released"}


def _notice(text: str) -> bytes:
    return codec.notice_response({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": text})


class Connection:
    """One client connection's protocol state after startup (see the module docstring)."""

    def __init__(self, tables: Callable[[], dict] = dict, *, label: str = "-"):
        self.tables = tables            # the analyst's tables' column types, for parameter types
        self.label = label              # who, in log lines
        self.tx = "I"
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.discard = False
        self._out: list[Out] = []
        self._flow: _Flow | None = None
        self._pending: Action | None = None

    # -- the interface
    def receive(self, msg) -> list[Out]:
        """One frontend message (a codec message object)."""
        if self._flow is not None:
            raise RuntimeError("an action is still pending: report it with completed() or failed()")
        self._flow = self._message(msg)
        return self._step(None, None)

    def receive_frame(self, kind: str, body: bytes) -> list[Out]:
        """One framed message (its type and body), parsed here: a malformed one is an error of
        the statement (ignored while discarding), not of the connection."""
        try:
            msg = codec.parse_message(kind, body)
        except codec.STREAM_ERRORS as err:
            if self.discard:
                return []
            self._fail(err)
            if kind == "Q":
                self._send(codec.ready_for_query(self.tx))
            return self._take()
        return self.receive(msg)

    def completed(self, action: Action, result: Any = None) -> list[Out]:
        self._check(action)
        return self._step(result, None)

    def failed(self, action: Action, err: BaseException) -> list[Out]:
        self._check(action)
        return self._step(None, err)

    def fatal(self, err: BaseException) -> list[Out]:
        """The byte stream cannot be framed any more: report it and end the connection."""
        self._send_error(err, fatal=True)
        self._out.append(DISCONNECT)
        return self._take()

    @property
    def pending(self) -> Action | None:
        return self._pending

    # -- machinery
    def _check(self, action: Action) -> None:
        if self._flow is None or action is not self._pending:
            raise RuntimeError(f"{action!r} is not the pending action")

    def _step(self, value: Any, err: BaseException | None) -> list[Out]:
        assert self._flow is not None
        try:
            action = self._flow.throw(err) if err is not None else self._flow.send(value)
        except StopIteration:
            self._flow, self._pending = None, None
        else:
            self._pending = action
            self._out.append(action)
        return self._take()

    def _take(self) -> list[Out]:
        out, self._out = self._out, []
        return out

    def _send(self, data: bytes) -> None:
        self._out.append(data)

    def _send_error(self, err: BaseException, *, fatal: bool = False) -> None:
        fields = error_fields(err)
        if fatal:
            fields["S"] = fields["V"] = "FATAL"
        log.info("connection %s: %s %s", self.label, fields.get("C"), fields.get("M"))
        self._send(codec.error_response(fields))

    def _fail(self, err: BaseException) -> None:
        """An error in a statement: report it; a transaction block becomes failed."""
        if not isinstance(err, Error):
            log.error("connection %s: internal error", self.label, exc_info=err)
        self._send_error(err)
        self.discard = True
        if self.tx != "I":
            self.tx = "E"

    # -- dispatch
    def _message(self, msg) -> _Flow:
        if isinstance(msg, codec.Terminate):
            yield DISCONNECT
        elif isinstance(msg, codec.Unknown):
            self._send_error(ProtocolViolation(f"invalid frontend message type {ord(msg.type)}"), fatal=True)
            yield DISCONNECT
        elif isinstance(msg, codec.Password):
            self._send_error(ProtocolViolation("unexpected password message"), fatal=True)
            yield DISCONNECT
        elif isinstance(msg, codec.Query):
            yield from self._simple(msg.sql)
        elif isinstance(msg, codec.Sync):
            self.discard = False
            if self.tx == "I":
                self.portals.clear()
            self._send(codec.ready_for_query(self.tx))
            yield FLUSH
        elif isinstance(msg, codec.Flush):
            yield FLUSH
        elif not self.discard:
            try:
                yield from self._extended(msg)
            except Exception as err:
                self._fail(err)

    # -- one statement through the transaction rules
    def _run(self, sql: str, params: list | None, session_sql: str | None = None) -> Generator[Action, Any, Answer]:
        kind = classify(sql)
        if self.tx == "E":
            if kind is StatementKind.COMMIT:
                self.tx = "I"
                return Answer([], [], "ROLLBACK")
            if kind not in (StatementKind.ROLLBACK, StatementKind.ROLLBACK_TO):
                raise InFailedTransaction()
        ans = yield Run(sql, params, session_sql or sql, kind)
        if kind is StatementKind.DEALLOCATE:
            name = deallocated(sql)
            if name.upper() == "ALL":
                self.statements = {k: v for k, v in self.statements.items() if not k}
            else:
                self.statements.pop(name, None)
        elif kind is StatementKind.DISCARD and discards_all(sql):
            self.statements = {k: v for k, v in self.statements.items() if not k}
            self.portals = {k: v for k, v in self.portals.items() if not k}
        if kind.starts_transaction or kind is StatementKind.ROLLBACK_TO:
            self.tx = "T"
        elif kind.ends_transaction:
            self.tx = "I"
        return ans

    # -- simple query protocol
    def _simple(self, text: str) -> _Flow:
        self.statements.pop("", None)
        self.portals.pop("", None)
        stmts, rest = split_statements(text)
        if rest.strip() and not only_comments(rest):
            stmts.append(rest.strip())
        if not stmts:
            self._send(codec.EMPTY_QUERY)
        seen = 0
        for sql in stmts:
            at = text.find(sql, seen)       # where this statement starts in the query string
            seen = at + len(sql) if at >= 0 else seen
            try:
                yield from self._one_simple(sql)
            except Exception as err:
                if isinstance(err, Error) and err.position is not None and at > 0:
                    err.position += at      # PostgreSQL's Position counts from the query string's start
                self._fail(err)
                break
        self.discard = False
        self._send(codec.ready_for_query(self.tx))
        yield FLUSH

    def _one_simple(self, sql: str) -> _Flow:
        if classify(sql) is StatementKind.COPY:
            yield from self._copy_out(sql)
            return
        ans = yield from self._run(sql, None)
        if ans.empty:
            self._send(codec.EMPTY_QUERY)
            return
        fields = [codec.Field(n, oid, size, mod) for n, oid, size, mod in ans.columns]
        if fields:
            self._send(codec.row_description(fields))
        if ans.rows:
            yield SendRows(ans, fields, 0, len(ans.rows))
        if ans.notice:
            self._send(_notice(ans.notice))
        self._send(codec.command_complete(ans.tag))

    def _copy_out(self, sql: str) -> _Flow:
        """COPY (query) TO STDOUT (psql's \\copy): the query's released rows as CopyData."""
        spec = _copy.parse(sql)
        ans = yield from self._run(spec.query, None)
        self._send(codec.copy_out_response(len(ans.columns)))
        for line in _copy.lines(spec, [c[0] for c in ans.columns], ans.rows, ans.text_rows):
            self._send(codec.copy_data(line))
        self._send(codec.COPY_DONE)
        if ans.notice:
            self._send(_notice(ans.notice))
        self._send(codec.command_complete(f"COPY {len(ans.rows)}"))

    # -- extended query protocol
    def _extended(self, msg) -> _Flow:
        if isinstance(msg, codec.Parse):
            self._parse(msg)
        elif isinstance(msg, codec.Bind):
            self._bind(msg)
        elif isinstance(msg, codec.Describe):
            if msg.kind == "S":
                yield from self._describe_statement(msg.name)
            else:
                portal = self._portal(msg.name)
                yield from self._execute_portal(portal)
                fields = _portal_fields(portal)
                self._send(codec.row_description(fields) if fields else codec.NO_DATA)
        elif isinstance(msg, codec.Execute):
            yield from self._execute(msg)
        elif isinstance(msg, codec.Close):
            (self.statements if msg.kind == "S" else self.portals).pop(msg.name, None)
            self._send(codec.CLOSE_COMPLETE)

    def _parse(self, msg: codec.Parse) -> None:
        if msg.name and msg.name in self.statements:
            raise DuplicatePreparedStatement(f'prepared statement "{msg.name}" already exists')
        session_sql, casts = strip_param_casts(msg.sql)
        oids = list(msg.param_oids) + [0] * max(0, max(casts, default=0) - len(msg.param_oids))
        for n, oid in casts.items():
            oids[n - 1] = oids[n - 1] or oid
        self.statements[msg.name] = Prepared(msg.sql, oids, named_params(session_sql))
        self._send(codec.PARSE_COMPLETE)

    def _bind(self, msg: codec.Bind) -> None:
        stmt = self.statements.get(msg.statement)
        if stmt is None:
            raise InvalidSqlStatementName(f'prepared statement "{msg.statement}" does not exist')
        if msg.portal and msg.portal in self.portals:
            raise DuplicateCursor(f'portal "{msg.portal}" already exists')
        self.portals[msg.portal] = Portal(stmt, _bind_values(stmt, msg, self._param_oids), msg.result_formats)
        self._send(codec.BIND_COMPLETE)

    def _execute(self, msg: codec.Execute) -> _Flow:
        portal = self._portal(msg.portal)
        yield from self._execute_portal(portal)
        ans = portal.result
        assert ans is not None
        if ans.empty:
            self._send(codec.EMPTY_QUERY)
            return
        fields = _portal_fields(portal)
        stop = len(ans.rows) if msg.max_rows <= 0 else min(len(ans.rows), portal.position + msg.max_rows)
        if stop > portal.position:
            yield SendRows(ans, fields, portal.position, stop)
        portal.position = stop
        if stop < len(ans.rows):
            self._send(codec.PORTAL_SUSPENDED)
            return
        if ans.notice and not portal.notice_sent:
            portal.notice_sent = True
            self._send(_notice(ans.notice))
        self._send(codec.command_complete(ans.tag))

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise InvalidCursorName(f'portal "{name}" does not exist')
        return portal

    def _param_oids(self, stmt: Prepared) -> list[int]:
        if stmt.inferred is None:
            try:
                tables = self.tables()
            except Exception:
                tables = {}
            stmt.inferred = infer_param_oids(stmt.sql, stmt.param_oids, tables)
        return stmt.inferred

    def _describe_statement(self, name: str) -> _Flow:
        stmt = self.statements.get(name)
        if stmt is None:
            raise InvalidSqlStatementName(f'prepared statement "{name}" does not exist')
        oids = self._param_oids(stmt)
        cols = yield Describe(stmt.sql, stmt.session_sql, oids, classify(stmt.sql))
        self._send(codec.parameter_description(oids))
        fields = [codec.Field(n, oid, size, mod) for n, oid, size, mod in cols]
        self._send(codec.row_description(fields) if fields else codec.NO_DATA)

    def _execute_portal(self, portal: Portal) -> _Flow:
        if portal.result is None:
            st = portal.statement
            portal.result = yield from self._run(st.sql, portal.params or None, st.session_sql)


def _bind_values(stmt: Prepared, bind: codec.Bind, infer: Callable[[Prepared], list[int]]) -> list:
    """A Bind's parameters as Python values, each decoded by the type Parse declared or, if it
    declared none, the type `infer` finds for it."""
    n = len(bind.params)
    fmts = bind.param_formats
    if len(fmts) not in (0, 1, n):
        raise ProtocolViolation(f"bind message has {len(fmts)} parameter formats but {n} parameters")
    expected = max(param_count(stmt.sql), len(stmt.param_oids))
    if n != expected:
        raise ProtocolViolation(f"bind message supplies {n} parameters, but prepared statement "
                                f"\"{bind.statement}\" requires {expected}")
    oids = stmt.param_oids + [0] * max(0, n - len(stmt.param_oids))
    if any(o == 0 for o in oids[:n]):
        inferred = infer(stmt)
        oids = [o or (inferred[i] if i < len(inferred) else 0) for i, o in enumerate(oids)]
    out = []
    for i, raw in enumerate(bind.params):
        fmt = fmts[0] if len(fmts) == 1 else (fmts[i] if fmts else 0)
        oid = oids[i]
        if fmt == 0 and oid in (25, 1043, 705):
            oid = 0
        out.append(decode_param(raw, oid, fmt))
    return out


def _portal_fields(portal: Portal) -> list[codec.Field]:
    ans = portal.result
    assert ans is not None
    n = len(ans.columns)
    rf = portal.result_formats
    fmts = [rf[0]] * n if len(rf) == 1 else (list(rf) if len(rf) == n else [0] * n)
    return [codec.Field(name, oid, size, mod, fmt) for (name, oid, size, mod), fmt in zip(ans.columns, fmts)]
