"""A connection's startup phase: SSL/GSSENC negotiation, TLS, the protocol version, authentication
(trust from loopback addresses, or SCRAM-SHA-256: auth.py) and the Session's opening.

This part stays asyncio code rather than joining the sans-IO protocol (protocol.py): each step is
an I/O step (a TLS upgrade of the socket, a SCRAM round trip per message) and it runs before a
Session exists; the protocol machine starts at the first ReadyForQuery.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging

from dpsql.errors import AuthenticationFailed, Error, InvalidAuthorization, ProtocolViolation
from dpsql.frontends.pgwire import auth as _auth
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire.protocol import error_fields

log = logging.getLogger("dpsql.server")

SERVER_VERSION = "15.0 (dpsql)"
_AUTH_MESSAGE_LIMIT = 10_000


async def _read_startup(reader: asyncio.StreamReader):
    head = await reader.readexactly(4)
    n = codec.startup_length(head)
    return codec.parse_startup(await reader.readexactly(n))


async def _negotiate(client):
    """SSLRequest and GSSENCRequest until a StartupMessage (returned) or a CancelRequest (None)."""
    tls = False
    server, writer = client.server, client.writer
    while True:
        msg = await _read_startup(client.reader)
        if isinstance(msg, codec.SSLRequest):
            if tls:
                raise ProtocolViolation("SSLRequest after TLS is established")
            writer.write(b"S" if server.ssl_context is not None else b"N")
            await writer.drain()
            if server.ssl_context is not None:
                await writer.start_tls(server.ssl_context)
                tls = True
        elif isinstance(msg, codec.GSSENCRequest):
            writer.write(b"N")
            await writer.drain()
        elif isinstance(msg, codec.CancelRequest):
            server.cancel(msg.pid, msg.secret)
            return None
        else:
            return msg


async def startup(client) -> bool:
    """Log the client in: its user, Session and catalog, backend key; ReadyForQuery sent.
    False if it did not log in (a FATAL error is queued, or it was a CancelRequest)."""
    msg = await _negotiate(client)
    if msg is None:
        return False
    server, params = client.server, msg.params
    user = params.get("user", "")
    if not user:
        raise ProtocolViolation("no PostgreSQL user name specified in startup packet")
    client.user = user
    client.database = params.get("database") or user
    unknown = [k for k in params if k.startswith("_pq_.")]
    if msg.minor > 0 or unknown:
        client.send(codec.negotiate_protocol_version(0, unknown))
    if not await _authenticate(client, user):
        return False
    try:
        server.connections.admit(user)     # before a session takes an engine connection
    except Error as err:
        log.info("connection from %s: %r refused: %s", client.peer, user, err)
        client.send_error(err, fatal=True)
        return False
    if not await _open_session(client, user):
        return False
    client.pid, client.secret = server.new_pid(client)
    client.send(codec.auth_ok())
    for k, v in (("server_version", SERVER_VERSION), ("server_encoding", "UTF8"),
                 ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"), ("integer_datetimes", "on"),
                 ("IntervalStyle", "postgres"), ("standard_conforming_strings", "on"), ("TimeZone", "UTC"),
                 ("application_name", params.get("application_name", "")), ("is_superuser", "off"),
                 ("session_authorization", user)):
        client.send(codec.parameter_status(k, v))
    client.send(codec.backend_key_data(client.pid, client.secret))
    client.send(codec.ready_for_query("I"))
    log.info("connection %d: %s authenticated from %s (database %s)", client.pid, user, client.peer,
             client.database)
    return True


async def _open_session(client, user: str) -> bool:
    server = client.server
    loop = asyncio.get_running_loop()
    try:
        client.session = await loop.run_in_executor(server.executor, server.backend.session, user)
    except BaseException as err:
        server.connections.leave(user)
        if not isinstance(err, Error):
            raise
        log.info("connection from %s: no session for %r: %s", client.peer, user, err)
        fields = error_fields(err)
        if fields["C"] == "08000":      # the name is not a valid analyst name
            fields["C"] = "28000"
        fields["S"] = fields["V"] = "FATAL"
        client.send(codec.error_response(fields))
        return False
    catalog_class = server.catalog_class
    if catalog_class is not None:
        client.catalog = catalog_class(client.session, database=client.database, user=user,
                                       server_version=SERVER_VERSION)
    return True


async def _read_auth_message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(5)
    kind, n = head[:1], int.from_bytes(head[1:], "big", signed=True)
    if kind != b"p":
        raise ProtocolViolation(f"expected a password message, got message type {kind!r}")
    if not 4 <= n <= _AUTH_MESSAGE_LIMIT:
        raise ProtocolViolation("invalid password message length")
    return await reader.readexactly(n - 4)


async def _authenticate(client, user: str) -> bool:
    server = client.server
    if server.auth == "trust":
        if not _is_loopback(client.peer_host):
            client.send_error(InvalidAuthorization(f'trust authentication is accepted only from loopback '
                                                   f'addresses; connection from {client.peer_host} refused',
                                                   "set [server] auth = \"scram-sha-256\" to admit remote clients"),
                              fatal=True)
            return False
        return True
    analyst = server.backend.policy.analysts.get(user)
    verifier = analyst.password if analyst is not None else None
    scram = _auth.ScramServer(verifier, user, mock=server.scram_mock)
    client.send(codec.auth_sasl([_auth.MECHANISM]))
    await client.flush()
    try:
        mech, first = codec.parse_sasl_initial(await _read_auth_message(client.reader))
        if mech != _auth.MECHANISM:
            raise ProtocolViolation("client selected an invalid SASL authentication mechanism")
        client.send(codec.auth_sasl_continue(scram.first(first)))
        await client.flush()
        final = scram.final(await _read_auth_message(client.reader))
    except AuthenticationFailed as err:
        log.info("connection from %s: authentication failed for %r", client.peer, user)
        client.send_error(err, fatal=True)
        return False
    client.send(codec.auth_sasl_final(final))
    return True


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
