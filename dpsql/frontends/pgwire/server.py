"""`dpsql serve`: a PostgreSQL wire-protocol (v3) server in front of dpsql.

One `Backend` per server; one `Session` per client connection, opened after authentication as
the connecting user name (the analyst) and closed when the client goes. Every statement goes
first to the catalog layer (driver introspection, SET/SHOW of server settings, transaction
commands); what it does not answer goes to `session.execute`, run in a worker thread so a slow
query never stalls other clients.

The protocol's framing is in codec.py (sans-IO), SCRAM in auth.py; this module is the asyncio
glue: startup (SSL/GSSENC negotiation, TLS, protocol version), authentication, the simple and
extended query protocols, transaction status, cancel requests and shutdown. Logs go to the
"dpsql.server" logger and never contain result values.

Server resources (limits.py): statements run on `Workers` (daemon threads); each analyst has at
most [server] max_concurrent_queries of them running (QuerySlots); CancelRequest, a client's
disconnect and shutdown stop a running private query (Session.cancel) and a running catalog
query (Catalog.cancel); shutdown waits `shutdown_timeout` seconds for the workers and goes on.

With `dpsql serve --workers N` (workers.py) a supervisor process accepts connections and hands
them to N processes each running this Server with a `WorkerLink`: connections arrive as file
descriptors, the per-analyst slots are SharedQuerySlots, and a CancelRequest for a connection
of another process is forwarded to it.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import hmac
import ipaddress
import logging
import os
import re
import secrets
import socket
import ssl
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dpsql.errors import (
    AuthenticationFailed,
    DuplicateCursor,
    DuplicatePreparedStatement,
    Error,
    InFailedTransaction,
    InternalError,
    InvalidAuthorization,
    InvalidCursorName,
    InvalidSqlStatementName,
    ProtocolViolation,
    QueryCanceled,
)
from dpsql.frontends.pgwire import auth as _auth
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire import copy as _copy
from dpsql.frontends.pgwire.limits import ConnectionLimits, QuerySlots, SharedQuerySlots, Workers
from dpsql.frontends.pgwire.types import (
    infer_param_oids,
    named_params,
    param_count,
    pg_type,
    strip_param_casts,
)
from dpsql.frontends.pgwire.workers import WorkerLink, pid_worker, worker_pid
from dpsql.sqltext import only_comments, split_statements, strip_comments

log = logging.getLogger("dpsql.server")

SERVER_VERSION = "15.0 (dpsql)"
STARTUP_TIMEOUT = 30.0
_AUTH_MESSAGE_LIMIT = 10_000
_FLUSH_BYTES = 64 * 1024
_SEND_BATCH = 2048                  # rows encoded between two checks of cancel and time (_send_rows)
_TX_START = {"BEGIN", "START"}
_TX_END = {"COMMIT", "END", "ROLLBACK", "ABORT"}
_FRAMING = object()          # queue marker: the byte stream cannot be framed any more
SHUTDOWN_TIMEOUT = 10.0
# Sockets one process keeps open beyond [server] max_connections: clients still starting up or
# authenticating (each for at most the startup timeout) and cancel requests. Past that a new
# socket is refused at once, so connections that never log in cannot exhaust the process's
# file descriptors (which the ledger, the engines and the logs need too).
STARTUP_MARGIN = 32
# Statements answered from the connection's own state (settings, transaction status, prepared
# statements) in microseconds: they never reach an engine or the catalog database, so they cannot
# hold a worker, and refusing them would only break drivers' connection setup and COMMIT/ROLLBACK.
# Every other statement (private, public and catalog queries, EXPLAIN, Describe) takes a slot.
_UNCOUNTED = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "SET", "RESET",
              "SHOW", "DISCARD", "DEALLOCATE"}


@dataclass
class _Prepared:
    sql: str
    param_oids: list[int]
    session_sql: str = ""          # the text for the Session: `$n::type` casts dropped (see types.py)
    inferred: list[int] | None = None


@dataclass
class _Portal:
    statement: _Prepared
    params: list
    result_formats: tuple[int, ...]
    result: Any = None             # (fields, rows, tag, notice) once run
    position: int = 0
    notice_sent: bool = False


@dataclass
class _Answer:
    """One statement's outcome in wire terms."""
    columns: list[tuple[str, int, int, int]]    # name, type oid, size, modifier
    rows: list[tuple]
    tag: str
    text_rows: bool = False                     # values already in PostgreSQL text (catalog replies)
    notice: str | None = None
    empty: bool = False


class Server:
    """The asyncio server. `await start()`, then `await serve_forever()` or `await close()`."""

    def __init__(self, backend, *, host: str = "127.0.0.1", port: int = 6432, auth: str | None = None,
                 max_message_bytes: int | None = None, startup_timeout: float = STARTUP_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None, workers: int = 64, catalog: Any = "auto",
                 max_concurrent_queries: int | None = None, shutdown_timeout: float = SHUTDOWN_TIMEOUT,
                 link: WorkerLink | None = None):
        self.backend = backend
        self.link = link
        server_policy = backend.policy.server
        self.host, self.port = host, port
        self.auth = auth or server_policy.auth
        self.max_message_bytes = max_message_bytes or server_policy.max_message_bytes
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self.ssl_context = ssl_context if ssl_context is not None else _ssl_context(server_policy)
        self.executor = Workers(workers, thread_name_prefix="dpsql-q")
        limit = max_concurrent_queries or server_policy.max_concurrent_queries
        self.slots = QuerySlots(limit) if link is None else SharedQuerySlots(limit, link.runtime_dir)
        self.max_sockets = server_policy.max_connections + STARTUP_MARGIN
        self.connections = ConnectionLimits(server_policy.max_connections, server_policy.max_connections_per_analyst,
                                            link.runtime_dir if link is not None else None)
        self.orphaned = asyncio.Event()         # a worker's supervisor is gone: time to stop
        self._adopting: set[asyncio.Task] = set()
        self.scram_mock = _auth.MockParams.for_policy(backend.policy) if self.auth != "trust" else None
        self.clients: dict[int, _Client] = {}
        self._catalog = _catalog_class() if catalog == "auto" else catalog
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._closing = False

    async def start(self) -> tuple[str, int]:
        if self.link is not None:       # a worker: connections come from the supervisor
            self.link.sock.setblocking(False)
            asyncio.get_running_loop().add_reader(self.link.sock.fileno(), self._handoff)
            log.info("worker %d ready (process %d)", self.link.index, os.getpid())
            return self.host, self.port
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        log.info("listening on %s:%d (auth %s%s)", self.host, self.port, self.auth,
                 ", tls" if self.ssl_context else "")
        return self.host, self.port

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        """Stop accepting, cancel running queries, close every client and its session.

        Bounded: running queries are cancelled (private ones through Session.cancel, catalog ones
        through Catalog.cancel) and get `shutdown_timeout` seconds to end; a worker still busy
        then (a query that ignores its cancel, an answer held by [timing] floor) is left to
        finish on its daemon thread, its session closed when it does, and close() returns."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_timeout
        if self._server is not None:
            self._server.close()
        if self.link is not None and self.link.sock.fileno() != -1:
            loop.remove_reader(self.link.sock.fileno())
        for c in list(self.clients.values()):
            c.shutdown()
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=self.shutdown_timeout)
            if pending:
                log.warning("shutdown: %d connection(s) still busy after %g s; closing them anyway",
                            len(pending), self.shutdown_timeout)
                for t in pending:
                    t.cancel()
                await asyncio.wait(pending, timeout=2)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except (TimeoutError, Exception):
                pass
        self.executor.shutdown(wait=False, cancel_futures=True)
        while self.executor.busy() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self.executor.busy():
            log.warning("shutdown: %d worker(s) still running a query; not waiting for them", self.executor.busy())
        log.info("stopped")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_sockets:
            log.warning("refusing a connection: %d sockets open ([server] max_connections + %d)",
                        len(self._tasks), STARTUP_MARGIN)
            writer.write(codec.error_response({
                "S": "FATAL", "V": "FATAL", "C": "53300",
                "M": f"sorry, too many clients already: at most {self.max_sockets} connections at once, "
                     f"counting those still logging in ([server] max_connections + {STARTUP_MARGIN})"}))
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                pass
            writer.close()
            return
        task = asyncio.current_task()
        self._tasks.add(task)
        client = _Client(self, reader, writer)
        try:
            await client.run()
        except asyncio.CancelledError:      # shutdown stopped waiting for this connection
            pass
        except Exception:   # never let one client take the server down
            log.exception("client %s: unexpected error", client.peer)
        finally:
            self._tasks.discard(task)

    # -- a worker's connections and cancels (workers.py)
    def _handoff(self) -> None:
        """The supervisor's socket is readable: new clients (b"A" + a descriptor), cancels
        forwarded from other workers, or EOF (the supervisor is gone)."""
        assert self.link is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(self.link.sock, 64, 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg and not fds:
                loop.remove_reader(self.link.sock.fileno())
                self.orphaned.set()
                return
            if msg[:1] == b"A" and not self._closing:
                for fd in fds:
                    self._adopt(fd)
                continue
            for fd in fds:
                os.close(fd)
            cancel = WorkerLink.cancel_message(msg)
            if cancel is not None:
                self.cancel(*cancel, forward=False)

    def _adopt(self, fd: int) -> None:
        """Serve a connection the supervisor accepted, exactly as one accepted here."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return
        sock.setblocking(False)
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._accept)

        task = loop.create_task(loop.connect_accepted_socket(protocol, sock))
        self._adopting.add(task)

        def done(t: asyncio.Task) -> None:
            self._adopting.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("cannot serve a handed-over connection: %s", t.exception())
                sock.close()
        task.add_done_callback(done)

    def new_pid(self, client: _Client) -> tuple[int, int]:
        while True:
            pid = secrets.randbelow(2**31 - 2) + 1 if self.link is None else \
                worker_pid(self.link.index, secrets.randbelow(1 << 24))
            if pid not in self.clients:
                self.clients[pid] = client
                return pid, secrets.randbits(31)

    def cancel(self, pid: int, secret: int, *, forward: bool = True) -> None:
        """A CancelRequest: stop the connection's running statement if the secret matches.
        A worker passes a request for another worker's connection to the supervisor."""
        owner = pid_worker(pid) if self.link is not None else None
        if forward and owner is not None and owner != self.link.index:
            log.info("cancel request for connection %d: passed to worker %d", pid, owner)
            self.link.forward_cancel(pid, secret)
            return
        c = self.clients.get(pid)
        if c is not None and hmac.compare_digest(secret.to_bytes(4, "big", signed=True),
                                                 c.secret.to_bytes(4, "big", signed=True)):
            log.info("cancel request for connection %d", pid)
            c.cancel_query()


def _ssl_context(server_policy) -> ssl.SSLContext | None:
    if server_policy.tls_cert is None or server_policy.tls_key is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(server_policy.tls_cert), str(server_policy.tls_key))
    return ctx


def _catalog_class():
    try:
        from dpsql.frontends.pgwire.catalog import Catalog
    except ImportError:
        return None
    return Catalog


class _Client:
    """One client connection: its session, statements, portals and transaction status."""

    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server, self.reader, self.writer = server, reader, writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "local")
        self._peer_host = peer[0] if isinstance(peer, tuple) else None
        self.pid = 0
        self.secret = 0
        self.user = ""
        self.session = None
        self.catalog = None
        self.tx = "I"
        self.statements: dict[str, _Prepared] = {}
        self.portals: dict[str, _Portal] = {}
        self.discard = False
        self.out: list[bytes] = []
        self.out_size = 0
        self.gone = False
        self._inflight = None              # the concurrent Future of the statement running, if any
        self._sending = False              # a statement's rows are being encoded (_send_rows)
        self._stop_sending = False         # a cancel arrived meanwhile: stop them
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=512)
        self._reader_task: asyncio.Task | None = None

    # -- output
    def send(self, data: bytes) -> None:
        self.out.append(data)
        self.out_size += len(data)

    async def flush(self) -> None:
        if not self.out:
            return
        data = b"".join(self.out)
        self.out.clear()
        self.out_size = 0
        if self.gone or self.writer.is_closing():
            return
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, OSError):
            self.gone = True

    def send_error(self, err: BaseException, *, fatal: bool = False) -> None:
        fields = _error_fields(err)
        if fatal:
            fields["S"] = fields["V"] = "FATAL"
        log.info("connection %d (%s): %s %s", self.pid, self.user or "-", fields.get("C"), fields.get("M"))
        self.send(codec.error_response(fields))

    # -- lifecycle
    async def run(self) -> None:
        log.info("connection from %s", self.peer)
        try:
            try:
                ok = await asyncio.wait_for(self._startup(), self.server.startup_timeout)
            except TimeoutError:
                log.info("%s: startup timed out", self.peer)
                self.send_error(ProtocolViolation("timeout waiting for the startup packet and authentication"),
                                fatal=True)
                ok = False
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                ok = False
            except codec.STREAM_ERRORS as err:
                self.send_error(err, fatal=True)
                ok = False
            await self.flush()
            if ok:
                await self._serve()
        finally:
            await self._cleanup()

    async def _cleanup(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        try:
            await self.flush()
        except Exception:
            pass
        if self.pid:
            self.server.clients.pop(self.pid, None)
        if self.session is not None:
            session, self.session = self.session, None
            catalog, self.catalog = self.catalog, None
            loop = asyncio.get_running_loop()
            pid, user, limits = self.pid, self.user, self.server.connections

            def close(_=None) -> None:
                try:
                    try:
                        if catalog is not None and hasattr(catalog, "close"):
                            catalog.close()
                    finally:
                        session.close()
                except Exception:
                    log.exception("closing the session of connection %d", pid)
                finally:
                    limits.leave(user)          # its engine connection is given back
            inflight = self._inflight
            if inflight is not None and not inflight.done():
                # still running (shutdown gave up waiting): close when it ends, on its thread
                inflight.add_done_callback(close)
            else:
                try:
                    await loop.run_in_executor(self.server.executor, close)
                except RuntimeError:      # executor shut down: close here
                    close()
        try:
            self.writer.close()
        except Exception:
            pass
        log.info("connection %d (%s) from %s closed", self.pid, self.user or "-", self.peer)

    def shutdown(self) -> None:
        """Server shutdown: cancel a running query and end the connection."""
        self.gone = True
        self.cancel_until_idle()
        try:
            self.queue.put_nowait(None)
        except asyncio.QueueFull:
            pass
        if self._reader_task is not None:
            self._reader_task.cancel()

    @property
    def running(self) -> bool:
        """A statement of this connection is running on a worker (even if nobody waits for it)."""
        fut = self._inflight
        return fut is not None and not fut.done()

    def cancel_query(self) -> None:
        """CancelRequest, disconnect, shutdown: stop the running statement, private or catalog, or
        the encoding of its rows (_send_rows)."""
        if self._sending:
            self._stop_sending = True
        if not self.running:
            return
        for what in (self.catalog, self.session):
            cancel = getattr(what, "cancel", None)
            if cancel is not None:
                try:
                    cancel()
                except Exception:
                    log.exception("cancel on connection %d", self.pid)

    def cancel_until_idle(self) -> None:
        """Disconnect, shutdown: cancel the running statement, again every 0.1 s until it ends.

        An engine's interrupt is lost if it comes before its query has started (DuckDB clears the
        flag when a query begins), and the statement may still be in analysis then. Repeating is
        safe here, unlike for CancelRequest: the connection is gone, no later statement of it can
        be hit by a late interrupt."""
        self.cancel_query()
        if self.running:
            try:
                asyncio.get_running_loop().call_later(0.1, self.cancel_until_idle)
            except RuntimeError:     # not on the event loop (nothing to repeat from)
                pass

    async def _in_worker(self, word: str, fn, *args):
        """Run fn(*args) on a worker, holding one of the analyst's query slots unless the
        statement is housekeeping (_UNCOUNTED). The slot is taken before anything runs (a
        refusal charges nothing) and given back when the worker is done, whatever the outcome
        and whether or not this coroutine still waits for it."""
        if self.catalog is not None and hasattr(self.catalog, "new_statement"):
            self.catalog.new_statement()
        counted = word not in _UNCOUNTED
        slots, user = self.server.slots, self.user
        if counted:
            slots.acquire(user)
        try:
            fut = self.server.executor.submit(fn, *args)
        except BaseException:
            if counted:
                slots.release(user)
            raise
        if counted:
            fut.add_done_callback(lambda _f: slots.release(user))
        self._inflight = fut
        return await asyncio.wrap_future(fut)

    # -- startup and authentication
    async def _read_startup(self):
        head = await self.reader.readexactly(4)
        n = codec.startup_length(head)
        return codec.parse_startup(await self.reader.readexactly(n))

    async def _startup(self) -> bool:
        tls = False
        while True:
            msg = await self._read_startup()
            if isinstance(msg, codec.SSLRequest):
                if tls:
                    raise ProtocolViolation("SSLRequest after TLS is established")
                if self.server.ssl_context is not None:
                    self.writer.write(b"S")
                    await self.writer.drain()
                    await self.writer.start_tls(self.server.ssl_context)
                    tls = True
                else:
                    self.writer.write(b"N")
                    await self.writer.drain()
                continue
            if isinstance(msg, codec.GSSENCRequest):
                self.writer.write(b"N")
                await self.writer.drain()
                continue
            if isinstance(msg, codec.CancelRequest):
                self.server.cancel(msg.pid, msg.secret)
                return False
            break
        params = msg.params
        user = params.get("user", "")
        if not user:
            raise ProtocolViolation("no PostgreSQL user name specified in startup packet")
        self.user = user
        self.database = params.get("database") or user
        self.application_name = params.get("application_name", "")
        unknown = [k for k in params if k.startswith("_pq_.")]
        if msg.minor > 0 or unknown:
            self.send(codec.negotiate_protocol_version(0, unknown))
        if not await self._authenticate(user):
            return False
        try:
            self.server.connections.admit(user)     # before a session takes an engine connection
        except Error as err:
            log.info("connection from %s: %r refused: %s", self.peer, user, err)
            self.send_error(err, fatal=True)
            return False
        loop = asyncio.get_running_loop()
        try:
            self.session = await loop.run_in_executor(self.server.executor, self.server.backend.session, user)
        except BaseException as err:
            self.server.connections.leave(user)
            if not isinstance(err, Error):
                raise
            log.info("connection from %s: no session for %r: %s", self.peer, user, err)
            fields = _error_fields(err)
            if fields["C"] == "08000":      # the name is not a valid analyst name
                fields["C"] = "28000"
            fields["S"] = fields["V"] = "FATAL"
            self.send(codec.error_response(fields))
            return False
        Catalog = self.server._catalog
        if Catalog is not None:
            self.catalog = Catalog(self.session, database=self.database, user=user, server_version=SERVER_VERSION)
        self.pid, self.secret = self.server.new_pid(self)
        self.send(codec.auth_ok())
        for k, v in (("server_version", SERVER_VERSION), ("server_encoding", "UTF8"),
                     ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"), ("integer_datetimes", "on"),
                     ("IntervalStyle", "postgres"), ("standard_conforming_strings", "on"), ("TimeZone", "UTC"),
                     ("application_name", self.application_name), ("is_superuser", "off"),
                     ("session_authorization", user)):
            self.send(codec.parameter_status(k, v))
        self.send(codec.backend_key_data(self.pid, self.secret))
        self.send(codec.ready_for_query("I"))
        log.info("connection %d: %s authenticated from %s (database %s)", self.pid, user, self.peer, self.database)
        return True

    async def _read_auth_message(self) -> bytes:
        head = await self.reader.readexactly(5)
        kind, n = head[:1], int.from_bytes(head[1:], "big", signed=True)
        if kind != b"p":
            raise ProtocolViolation(f"expected a password message, got message type {kind!r}")
        if not 4 <= n <= _AUTH_MESSAGE_LIMIT:
            raise ProtocolViolation("invalid password message length")
        return await self.reader.readexactly(n - 4)

    async def _authenticate(self, user: str) -> bool:
        method = self.server.auth
        if method == "trust":
            if not _is_loopback(self._peer_host):
                self.send_error(InvalidAuthorization(f'trust authentication is accepted only from loopback '
                                            f'addresses; connection from {self._peer_host} refused',
                                            "set [server] auth = \"scram-sha-256\" to admit remote clients"),
                                fatal=True)
                return False
            return True
        analyst = self.server.backend.policy.analysts.get(user)
        verifier = analyst.password if analyst is not None else None
        scram = _auth.ScramServer(verifier, user, mock=self.server.scram_mock)
        self.send(codec.auth_sasl([_auth.MECHANISM]))
        await self.flush()
        try:
            mech, first = codec.parse_sasl_initial(await self._read_auth_message())
            if mech != _auth.MECHANISM:
                raise ProtocolViolation("client selected an invalid SASL authentication mechanism")
            self.send(codec.auth_sasl_continue(scram.first(first)))
            await self.flush()
            final = scram.final(await self._read_auth_message())
        except AuthenticationFailed as err:
            log.info("connection from %s: authentication failed for %r", self.peer, user)
            self.send_error(err, fatal=True)
            return False
        self.send(codec.auth_sasl_final(final))
        return True

    # -- the normal phase
    async def _read_loop(self) -> None:
        decoder = codec.Decoder(self.server.max_message_bytes)
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                decoder.feed(data)
                while True:
                    try:
                        item = decoder.next()
                    except codec.STREAM_ERRORS as err:
                        await self.queue.put((_FRAMING, err))
                        return
                    if item is None:
                        break
                    await self.queue.put(item)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            return
        self.gone = True
        self.cancel_until_idle()
        await self.queue.put(None)

    async def _serve(self) -> None:
        await self.flush()
        self._reader_task = asyncio.create_task(self._read_loop())
        while True:
            item = await self.queue.get()
            if item is None:
                return
            kind, body = item
            if kind is _FRAMING:
                self.send_error(body, fatal=True)
                return
            if not await self._message(kind, body):
                return
            if self.out_size and (self.queue.empty() or self.out_size > _FLUSH_BYTES):
                await self.flush()
            if self.gone:
                return

    async def _message(self, kind: str, body: bytes) -> bool:
        try:
            msg = codec.parse_message(kind, body)
        except codec.STREAM_ERRORS as err:
            if self.discard:
                return True
            self._fail(err)
            if kind == "Q":
                self.send(codec.ready_for_query(self.tx))
            return True
        if isinstance(msg, codec.Terminate):
            return False
        if isinstance(msg, codec.Unknown):
            self.send_error(ProtocolViolation(f"invalid frontend message type {ord(msg.type)}"), fatal=True)
            return False
        if isinstance(msg, codec.Password):
            self.send_error(ProtocolViolation("unexpected password message"), fatal=True)
            return False
        if isinstance(msg, codec.Query):
            await self._simple(msg.sql)
            return True
        if isinstance(msg, codec.Sync):
            self.discard = False
            if self.tx == "I":
                self.portals.clear()
            self.send(codec.ready_for_query(self.tx))
            await self.flush()
            return True
        if isinstance(msg, codec.Flush):
            await self.flush()
            return True
        if self.discard:
            return True
        try:
            await self._extended(msg)
        except Exception as err:
            self._fail(err)
        return True

    def _fail(self, err: BaseException) -> None:
        """An error in a statement: report it; a transaction block becomes failed."""
        if not isinstance(err, Error):
            log.error("connection %d: internal error", self.pid, exc_info=err)
        self.send_error(err)
        self.discard = True
        if self.tx != "I":
            self.tx = "E"

    # -- simple query protocol
    async def _simple(self, text: str) -> None:
        self.statements.pop("", None)
        self.portals.pop("", None)
        stmts, rest = split_statements(text)
        if rest.strip() and not only_comments(rest):
            stmts.append(rest.strip())
        if not stmts:
            self.send(codec.EMPTY_QUERY)
        seen = 0
        for sql in stmts:
            at = text.find(sql, seen)       # where this statement starts in the query string
            seen = at + len(sql) if at >= 0 else seen
            try:
                if _first_word(sql) == "COPY":
                    await self._copy_out(sql)
                    continue
                ans = await self._run(sql, None)
            except Exception as err:
                if isinstance(err, Error) and err.position is not None and at > 0:
                    err.position += at      # PostgreSQL's Position counts from the query string's start
                self._fail(err)
                break
            if ans.empty:
                self.send(codec.EMPTY_QUERY)
                continue
            fields = [codec.Field(n, oid, size, mod) for n, oid, size, mod in ans.columns]
            if fields:
                self.send(codec.row_description(fields))
            try:
                await self._send_rows(ans, fields, [0] * len(fields), 0, len(ans.rows))
            except Exception as err:
                self._fail(err)
                break
            if ans.notice:
                self.send(codec.notice_response({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": ans.notice}))
            self.send(codec.command_complete(ans.tag))
            if self.out_size > _FLUSH_BYTES:
                await self.flush()
        self.discard = False
        self.send(codec.ready_for_query(self.tx))
        await self.flush()

    async def _copy_out(self, sql: str) -> None:
        """COPY (query) TO STDOUT (psql's \\copy): the query's released rows as CopyData."""
        spec = _copy.parse(sql)
        ans = await self._run(spec.query, None)
        self.send(codec.copy_out_response(len(ans.columns)))
        for line in _copy.lines(spec, [c[0] for c in ans.columns], ans.rows, ans.text_rows):
            self.send(codec.copy_data(line))
        self.send(codec.COPY_DONE)
        if ans.notice:
            self.send(codec.notice_response({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": ans.notice}))
        self.send(codec.command_complete(f"COPY {len(ans.rows)}"))

    async def _send_rows(self, ans: _Answer, fields: list[codec.Field], formats: list[int], start: int,
                         stop: int) -> None:
        """DataRows for ans.rows[start:stop], _SEND_BATCH at a time. Between batches: the output is
        flushed (or the loop yielded to), so that a large answer neither holds the event loop from
        the other connections nor piles up in memory; and a cancel (CancelRequest, disconnect) or
        the session's statement time limit (Session.check) ends the statement with QueryCanceled
        after the rows sent so far, as PostgreSQL's own errors mid-result do."""
        oids = [f.type_oid for f in fields]
        spec = list(zip(oids, formats))
        if not ans.text_rows:
            encode = codec.row_encoder(spec)
        else:
            def encode(row):
                return codec.data_row([v.encode("utf-8") if (v is not None and fmt == 0) else
                                       codec.text_to_binary(v, oid) for v, (oid, fmt) in zip(row, spec)])
        if stop - start <= _SEND_BATCH:
            for row in ans.rows[start:stop]:
                self.send(encode(row))
            return
        self._sending, self._stop_sending = True, False
        try:
            for at in range(start, stop, _SEND_BATCH):
                if at > start:
                    if self.out_size > _FLUSH_BYTES:
                        await self.flush()
                    else:
                        await asyncio.sleep(0)
                    if self._stop_sending or self.gone:
                        raise QueryCanceled("canceling statement due to user request: the query was cancelled")
                    if self.session is not None and not ans.text_rows and start == 0:
                        self.session.check()
                for row in ans.rows[at:min(stop, at + _SEND_BATCH)]:
                    self.send(encode(row))
        finally:
            self._sending = self._stop_sending = False

    async def _run(self, sql: str, params: list | None, session_sql: str | None = None) -> _Answer:
        """One statement through the transaction rules, the catalog and the Session."""
        word = _first_word(sql)
        if self.tx == "E":
            if word in ("COMMIT", "END"):
                self.tx = "I"
                return _Answer([], [], "ROLLBACK")
            if word in ("ROLLBACK", "ABORT"):
                pass
            else:
                raise InFailedTransaction()
        ans = await self._in_worker(word, self._answer, sql, params, word, session_sql or sql)
        if word == "DEALLOCATE":
            name = strip_comments(sql).split()[-1].strip(' ;"')
            if name.upper() == "ALL":
                self.statements = {k: v for k, v in self.statements.items() if not k}
            else:
                self.statements.pop(name, None)
        elif word == "DISCARD" and "ALL" in sql.upper():
            self.statements = {k: v for k, v in self.statements.items() if not k}
            self.portals = {k: v for k, v in self.portals.items() if not k}
        if word in _TX_START:
            self.tx = "T"
        elif word in _TX_END:
            self.tx = "T" if (word == "ROLLBACK" and _rollback_to(sql)) else "I"
        return ans

    def _answer(self, sql: str, params: list | None, word: str, session_sql: str) -> _Answer:
        """In a worker thread: the catalog's reply, else the Session's result, as an _Answer."""
        if self.gone:
            raise QueryCanceled("canceling statement: the client has disconnected")
        reply = None
        if self.catalog is not None:
            reply = self.catalog.answer(sql, _text_params(params))
        else:
            reply = _fallback(sql, word)
        if reply is not None:
            if word == "DISCARD" and reply.tag == "DISCARD ALL" and self.session is not None:
                self.session.execute("RESET ALL")      # dpsql.epsilon/delta/mechanism back to the policy's
            cols = [(c.name, c.type_oid, c.type_size, c.type_modifier) for c in reply.columns]
            return _Answer(cols, list(reply.rows), reply.tag, text_rows=True)
        session = self.session
        if session is None:
            raise InternalError("the session is closed")
        res = session.execute(session_sql, _mapping(params))
        if res.tag == "EMPTY":
            return _Answer([], [], "", empty=True)
        types = res.db_types or ["VARCHAR"] * len(res.columns)
        cols = []
        for name, t in zip(res.columns, types):
            pt = pg_type(t)
            cols.append((name, pt.oid, pt.size, -1))
        notice = res.status if res.kind == "private" else None
        return _Answer(cols, res.rows, res.tag or "SELECT 0", notice=notice)

    # -- extended query protocol
    async def _extended(self, msg) -> None:
        if isinstance(msg, codec.Parse):
            if msg.name and msg.name in self.statements:
                raise DuplicatePreparedStatement(f'prepared statement "{msg.name}" already exists')
            session_sql, casts = strip_param_casts(msg.sql)
            oids = list(msg.param_oids) + [0] * max(0, max(casts, default=0) - len(msg.param_oids))
            for n, oid in casts.items():
                oids[n - 1] = oids[n - 1] or oid
            self.statements[msg.name] = _Prepared(msg.sql, oids, named_params(session_sql))
            self.send(codec.PARSE_COMPLETE)
        elif isinstance(msg, codec.Bind):
            stmt = self.statements.get(msg.statement)
            if stmt is None:
                raise InvalidSqlStatementName(f'prepared statement "{msg.statement}" does not exist')
            if msg.portal and msg.portal in self.portals:
                raise DuplicateCursor(f'portal "{msg.portal}" already exists')
            self.portals[msg.portal] = _Portal(stmt, self._decode_params(stmt, msg), msg.result_formats)
            self.send(codec.BIND_COMPLETE)
        elif isinstance(msg, codec.Describe):
            if msg.kind == "S":
                await self._describe_statement(msg.name)
            else:
                portal = self._portal(msg.name)
                await self._execute_portal(portal)
                fields = self._portal_fields(portal)
                self.send(codec.row_description(fields) if fields else codec.NO_DATA)
        elif isinstance(msg, codec.Execute):
            portal = self._portal(msg.portal)
            await self._execute_portal(portal)
            ans: _Answer = portal.result
            if ans.empty:
                self.send(codec.EMPTY_QUERY)
                return
            fields = self._portal_fields(portal)
            stop = len(ans.rows) if msg.max_rows <= 0 else min(len(ans.rows), portal.position + msg.max_rows)
            await self._send_rows(ans, fields, [f.format for f in fields], portal.position, stop)
            portal.position = stop
            if stop < len(ans.rows):
                self.send(codec.PORTAL_SUSPENDED)
                return
            if ans.notice and not portal.notice_sent:
                portal.notice_sent = True
                self.send(codec.notice_response({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": ans.notice}))
            self.send(codec.command_complete(ans.tag))
        elif isinstance(msg, codec.Close):
            (self.statements if msg.kind == "S" else self.portals).pop(msg.name, None)
            self.send(codec.CLOSE_COMPLETE)

    def _portal(self, name: str) -> _Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise InvalidCursorName(f'portal "{name}" does not exist')
        return portal

    def _param_oids(self, stmt: _Prepared) -> list[int]:
        if stmt.inferred is None:
            tables = {}
            if self.session is not None:
                try:
                    tables = self.session.schema.columns
                except Exception:
                    tables = {}
            stmt.inferred = infer_param_oids(stmt.sql, stmt.param_oids, tables)
        return stmt.inferred

    def _decode_params(self, stmt: _Prepared, bind: codec.Bind) -> list:
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
            inferred = self._param_oids(stmt)
            oids = [o or (inferred[i] if i < len(inferred) else 0) for i, o in enumerate(oids)]
        out = []
        for i, raw in enumerate(bind.params):
            fmt = fmts[0] if len(fmts) == 1 else (fmts[i] if fmts else 0)
            oid = oids[i]
            if fmt == 0 and oid in (25, 1043, 705):
                oid = 0
            out.append(codec.decode_param(raw, oid, fmt))
        return out

    async def _describe_statement(self, name: str) -> None:
        stmt = self.statements.get(name)
        if stmt is None:
            raise InvalidSqlStatementName(f'prepared statement "{name}" does not exist')
        oids = self._param_oids(stmt)
        cols = await self._in_worker(_first_word(stmt.sql), self._describe, stmt, oids)
        self.send(codec.parameter_description(oids))
        fields = [codec.Field(n, oid, size, mod) for n, oid, size, mod in cols]
        self.send(codec.row_description(fields) if fields else codec.NO_DATA)

    def _describe(self, stmt: _Prepared, oids: list[int]) -> list[tuple[str, int, int, int]]:
        sql = stmt.sql
        word = _first_word(sql)
        if self.catalog is not None:
            cols = self.catalog.describe(sql)
            if cols is not None:
                return [(c.name, c.type_oid, c.type_size, c.type_modifier) for c in cols]
        if word in _TX_START | _TX_END | {"SAVEPOINT", "RELEASE", ""}:
            return []
        if self.catalog is not None and word in ("SET", "RESET", "DISCARD", "SHOW") and \
                not _mentions_dpsql(sql):
            return []
        dummy = [_dummy(o) for o in oids] if oids else None
        names, types = self.session.describe(stmt.session_sql or sql, _mapping(dummy))
        out = []
        for n, t in zip(names, types):
            pt = pg_type(t)
            out.append((n, pt.oid, pt.size, -1))
        return out

    async def _execute_portal(self, portal: _Portal) -> None:
        if portal.result is None:
            st = portal.statement
            portal.result = await self._run(st.sql, portal.params or None, st.session_sql)

    @staticmethod
    def _portal_fields(portal: _Portal) -> list[codec.Field]:
        ans: _Answer = portal.result
        n = len(ans.columns)
        rf = portal.result_formats
        fmts = [rf[0]] * n if len(rf) == 1 else (list(rf) if len(rf) == n else [0] * n)
        return [codec.Field(name, oid, size, mod, fmt) for (name, oid, size, mod), fmt in zip(ans.columns, fmts)]


# -- helpers ----------------------------------------------------------------------------------------

def _error_fields(err: BaseException) -> dict[str, str]:
    if isinstance(err, Error):
        return dict(err.wire_fields())
    return {"S": "ERROR", "V": "ERROR", "C": "XX000",
            "M": f"internal error ({type(err).__name__}); nothing was released"}


def _first_word(sql: str) -> str:
    text = strip_comments(sql).lstrip(" \t\r\n(;")
    i = 0
    while i < len(text) and (text[i].isalpha() or text[i] == "_"):
        i += 1
    return text[:i].upper()


def _rollback_to(sql: str) -> bool:
    words = strip_comments(sql).upper().split()
    return len(words) >= 2 and words[1] == "TO" or (len(words) >= 3 and words[2] == "TO")


def _mentions_dpsql(sql: str) -> bool:
    return "dpsql." in sql.lower()


_DRIVER_SETTINGS = re.compile(r"^\s*SET\s+(?:SESSION\s+)?(extra_float_digits|application_name|client_encoding|"
                              r"datestyle|timezone|search_path|intervalstyle)\b", re.IGNORECASE)


def _fallback(sql: str, word: str):
    """While the catalog layer is absent: transaction commands (every dpsql statement is a read
    charged at once, so there is nothing to commit) and the SETs drivers send on connecting."""
    from types import SimpleNamespace
    if word in _TX_START | _TX_END | {"SAVEPOINT", "RELEASE"}:
        tag = {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(word, word)
        return SimpleNamespace(columns=[], rows=[], tag=tag)
    if word == "SET" and _DRIVER_SETTINGS.match(strip_comments(sql)):
        return SimpleNamespace(columns=[], rows=[], tag="SET")
    return None


def _mapping(params: list | None) -> dict | None:
    """Positional Bind values as the named parameters of named_params(): {"p1": v1, ...}."""
    if not params:
        return None
    return {f"p{i}": v for i, v in enumerate(params, 1)}


def _text_params(params: list | None) -> list[str | None] | None:
    if params is None:
        return None
    return [None if p is None else codec.format_text(p) for p in params]


def _dummy(oid: int) -> object:
    if oid in codec.INT_OIDS:
        return 0
    if oid in codec.FLOAT_OIDS:
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


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return True     # a Unix socket
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


# -- running a server in a background thread (tests, benchmarks) -------------------------------------

class ServerThread:
    """A Server on its own event loop in a daemon thread.

        with ServerThread(backend, port=0) as srv:
            psycopg.connect(f"host=127.0.0.1 port={srv.port} user=alice ...")
    """

    def __init__(self, backend, **options: Any):
        self.backend = backend
        self.options = options
        self.loop = asyncio.new_event_loop()
        self.server = Server(backend, **{"port": 0, **options})
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="dpsql-serve", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as err:
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.server.close(), self.loop)
        try:
            fut.result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
