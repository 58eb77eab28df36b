"""One client connection of `dpsql serve`: the byte pump between its socket and its protocol.

After the startup phase (startup.py: SSL/GSSENC negotiation, TLS, authentication, the Session),
`Client` frames what the client sends (codec.Decoder, on a reader task), feeds each message to
the sans-IO protocol machine (protocol.Connection), writes the bytes the machine returns and runs
its actions: a statement or a Describe on a worker thread (handler.Handler: the catalog first,
then the Session, so a slow query never stalls other clients) holding one of the analyst's query
slots, a result's rows in batches. It also stops what runs on a CancelRequest, a disconnect or
shutdown, and closes the Session when the client goes.
"""
from __future__ import annotations

import asyncio
import logging
import time

from dpsql.errors import ProtocolViolation, QueryCanceled
from dpsql.frontends.pgwire import codec, values
from dpsql.frontends.pgwire.handler import Handler
from dpsql.frontends.pgwire.protocol import (
    DISCONNECT,
    FLUSH,
    Action,
    Connection,
    Describe,
    Out,
    Run,
    SendRows,
    error_fields,
)
from dpsql.frontends.pgwire.startup import startup
from dpsql.frontends.pgwire.statements import StatementKind
from dpsql.session import release_time

log = logging.getLogger("dpsql.server")

_FLUSH_BYTES = 64 * 1024
_SEND_BATCH = 2048                  # rows encoded between two checks of cancel and time (_send_rows)
_FRAMING = object()          # queue marker: the byte stream cannot be framed any more


class Client:
    """One client connection's byte pump: startup, then messages into its protocol.Connection,
    bytes out and actions run."""

    def __init__(self, server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server, self.reader, self.writer = server, reader, writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "local")
        self.peer_host = peer[0] if isinstance(peer, tuple) else None
        self.pid = self.secret = 0
        self.user = self.database = ""
        self.session = self.catalog = None          # set by startup()
        self.handler: Handler | None = None
        self.conn: Connection | None = None
        self.out: list[bytes] = []
        self.out_size = 0
        self.gone = False
        self._inflight = None              # the concurrent Future of the statement running, if any
        self._sending = False              # a statement's rows are being encoded (_send_rows)
        self._stop_sending = False         # a cancel arrived meanwhile: stop them
        self._slot_wait: asyncio.Future | None = None   # the wait for a query slot (_take_slot)
        self._wait_cancelled = False       # cancel_query ended that wait
        self.held_until: float | None = None   # an answer waits for its release time until then (_hold)
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
        fields = error_fields(err)
        if fatal:
            fields["S"] = fields["V"] = "FATAL"
        log.info("connection %d (%s): %s %s", self.pid, self.user or "-", fields.get("C"), fields.get("M"))
        self.send(codec.error_response(fields))

    # -- lifecycle
    async def run(self) -> None:
        log.info("connection from %s", self.peer)
        try:
            try:
                ok = await asyncio.wait_for(startup(self), self.server.startup_timeout)
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
                self.handler = Handler(self.session, self.catalog)
                self.conn = Connection(self.handler.tables, label=f"{self.pid} ({self.user})")
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
            handler = self.handler or Handler(self.session, self.catalog)
            self.session = self.catalog = self.handler = None
            pid, user, limits = self.pid, self.user, self.server.connections

            def close(_=None) -> None:
                try:
                    handler.close()
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
                    await asyncio.get_running_loop().run_in_executor(self.server.executor, close)
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
        if self._slot_wait is not None and not self._slot_wait.done():
            self._wait_cancelled = True
            self._slot_wait.cancel()
        if self.running and self.handler is not None:
            self.handler.cancel(self.pid)

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

    async def _in_worker(self, kind: StatementKind, fn, *args):
        """Run fn(*args) on a worker, holding one of the analyst's query slots unless the
        statement is housekeeping. The slot is taken before anything runs (a refusal charges
        nothing) and given back when the worker is done, whatever the outcome and whether or not
        this coroutine still waits for it."""
        assert self.handler is not None
        self.handler.new_statement()
        counted = not kind.housekeeping
        slots, user = self.server.slots, self.user
        if counted:
            await _take_slot(self)
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

    # -- the normal phase
    async def _read_loop(self) -> None:
        decoder = codec.Decoder(self.server.max_message_bytes)
        try:
            while data := await self.reader.read(65536):
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
        assert self.conn is not None
        self._reader_task = asyncio.create_task(self._read_loop())
        while True:
            item = await self.queue.get()
            if item is None:
                return
            kind, body = item
            outs = self.conn.fatal(body) if kind is _FRAMING else self.conn.receive_frame(kind, body)
            if not await self._pump(outs):
                return
            if self.out_size and (self.queue.empty() or self.out_size > _FLUSH_BYTES):
                await self.flush()
            if self.gone:
                return

    async def _pump(self, outs: list[Out]) -> bool:
        """Send the machine's bytes and run its actions until it wants the next message; False
        when the connection is to end."""
        assert self.conn is not None
        while outs:
            action = outs.pop() if not isinstance(outs[-1], bytes) else None
            for data in outs:
                self.send(data)     # type: ignore[arg-type]
            if action is None:
                return True
            if action is DISCONNECT:
                return False
            try:
                result = await self._act(action)
            except Exception as err:
                outs = self.conn.failed(action, err)
            else:
                outs = self.conn.completed(action, result)
        return True

    async def _act(self, action: Action):
        assert self.handler is not None
        if action is FLUSH:
            await self.flush()
            return None
        if self.out_size > _FLUSH_BYTES:
            await self.flush()
        if isinstance(action, Run):
            received = time.monotonic()
            try:
                result = await self._in_worker(action.kind, self._query, action)
            except Exception:
                await _hold(self, received)
                raise
            await _hold(self, received)
            return result
        if isinstance(action, Describe):
            return await self._in_worker(action.kind, self.handler.describe, action.sql, action.session_sql,
                                         action.param_oids, action.kind)
        if isinstance(action, SendRows):
            return await self._send_rows(action)
        raise AssertionError(f"unknown action {action!r}")

    def _query(self, run: Run):
        """In a worker thread: one statement (handler.Handler.query)."""
        if self.gone:
            raise QueryCanceled("canceling statement: the client has disconnected")
        assert self.handler is not None
        return self.handler.query(run.sql, run.params, run.kind, run.session_sql)

    async def _send_rows(self, action: SendRows) -> None:
        """DataRows for answer.rows[start:stop], _SEND_BATCH at a time. Between batches: the output
        is flushed (or the loop yielded to), so that a large answer neither holds the event loop
        from the other connections nor piles up in memory; and a cancel (CancelRequest,
        disconnect) or the session's statement time limit (Session.check) ends the statement with
        QueryCanceled after the rows sent so far, as PostgreSQL's own errors mid-result do."""
        ans, start, stop = action.answer, action.start, action.stop
        spec = [(f.type_oid, f.format) for f in action.fields]
        if not ans.text_rows:
            encode = values.row_encoder(spec)
        else:
            def encode(row):
                return codec.data_row([v.encode("utf-8") if (v is not None and fmt == 0) else
                                       values.text_to_binary(v, oid) for v, (oid, fmt) in zip(row, spec)])
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


async def _take_slot(self: Client) -> None:
    """Wait (on the event loop, holding no thread) for one of the analyst's query slots, at
    most [server] query_wait seconds (limits.QuerySlots.wait). A CancelRequest or a
    disconnect ends the wait with QueryCanceled; nothing has run or been charged."""
    wait = asyncio.ensure_future(self.server.slots.wait(self.user, self.server.query_wait))
    self._slot_wait = wait
    try:
        await wait
    except asyncio.CancelledError:
        if wait.cancelled() and self._wait_cancelled:
            raise QueryCanceled("canceling statement due to user request: the query was cancelled "
                                "while it waited for a query slot") from None
        wait.cancel()
        raise
    finally:
        self._slot_wait, self._wait_cancelled = None, False


async def _hold(self: Client, received: float) -> None:
    """The release timing of a private query (dpsql.session.release_time), answered or failed:
    nothing of it, not its RowDescription nor its error, is sent before the time the policy's
    [timing] allows, counted from when this connection received the statement. The wait is
    asyncio.sleep on the event loop: the worker thread and the query slot are already free,
    so the timing defence costs latency, never throughput.

    Why this is as safe as the Session's own sleep: what the analyst observes is when the
    bytes reach the client, and they are sent only after the same deadline, computed by the
    same rule. Counting from the statement's arrival (not from the Session's start) puts the
    waits for a query slot and a worker inside the hidden time too: a slot or thread freed
    early by another query, whose run time depends on its data, moves no answer's release
    unless the total crosses the floor, the residual channel the quantum already bounds."""
    handler = self.handler
    if handler is None or not handler.hold or self.gone:
        return
    handler.hold = False
    session = self.session
    if session is None:
        return
    self.held_until = deadline = release_time(session, received)
    try:
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(left)
    finally:
        self.held_until = None
