"""`dpsql serve`: a PostgreSQL wire-protocol (v3) server in front of dpsql.

One `Backend` per server; one `Session` per client connection, opened after authentication as
the connecting user name (the analyst) and closed when the client goes. This module is the
asyncio part: `Server` accepts connections (or takes them from a supervisor), routes cancel
requests and shuts down; `Client` is one connection's byte pump. After the startup phase
(startup.py: SSL/GSSENC negotiation, TLS, authentication) it frames what the client sends
(codec.Decoder), feeds each message to the sans-IO protocol machine (protocol.Connection), writes
the bytes the machine returns and runs its actions: a statement or a Describe on a worker thread
(handler.Handler: the catalog first, then the Session, so a slow query never stalls other
clients), a result's rows in batches. Logs go to the "dpsql.server" logger and never contain
result values.

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
import hmac
import logging
import os
import secrets
import socket
import ssl
import threading
from typing import Any

from dpsql.frontends.pgwire import auth as _auth
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire.catalog import Catalog
from dpsql.frontends.pgwire.client import Client
from dpsql.frontends.pgwire.limits import ConnectionLimits, QuerySlots, SharedQuerySlots, Workers

log = logging.getLogger("dpsql.server")

STARTUP_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 10.0
# Sockets one process keeps open beyond [server] max_connections: clients still starting up or
# authenticating (each for at most the startup timeout) and cancel requests. Past that a new
# socket is refused at once, so connections that never log in cannot exhaust the process's
# file descriptors (which the ledger, the engines and the logs need too).
STARTUP_MARGIN = 32


class Server:
    """The asyncio server. `await start()`, then `await serve_forever()` or `await close()`."""

    def __init__(self, backend, *, host: str = "127.0.0.1", port: int = 6432, auth: str | None = None,
                 max_message_bytes: int | None = None, startup_timeout: float = STARTUP_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None, workers: int = 64, catalog: Any = "auto",
                 max_concurrent_queries: int | None = None, shutdown_timeout: float = SHUTDOWN_TIMEOUT,
                 link: Any = None):
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
        self.query_wait = server_policy.query_wait      # seconds a statement waits for a slot
        self.max_sockets = server_policy.max_connections + STARTUP_MARGIN
        self.connections = ConnectionLimits(server_policy.max_connections, server_policy.max_connections_per_analyst,
                                            link.runtime_dir if link is not None else None)
        self.orphaned = asyncio.Event()         # a worker's supervisor is gone: time to stop
        self._adopting: set[asyncio.Task] = set()
        self.scram_mock = _auth.MockParams.for_policy(backend.policy) if self.auth != "trust" else None
        self.clients: dict[int, Client] = {}
        self.catalog_class = Catalog if catalog == "auto" else catalog
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
        client = Client(self, reader, writer)
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
            cancel = self.link.cancel_message(msg)
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

    def new_pid(self, client: Client) -> tuple[int, int]:
        while True:
            pid = secrets.randbelow(2**31 - 2) + 1 if self.link is None else \
                self.link.pid(secrets.randbelow(1 << 24))
            if pid not in self.clients:
                self.clients[pid] = client
                return pid, secrets.randbits(31)

    def cancel(self, pid: int, secret: int, *, forward: bool = True) -> None:
        """A CancelRequest: stop the connection's running statement if the secret matches.
        A worker passes a request for another worker's connection to the supervisor."""
        owner = self.link.owner(pid) if self.link is not None else None
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
