"""Sans-IO codec for the PostgreSQL frontend/backend protocol, version 3.0.

Bytes in, messages out; messages in, bytes out. No sockets and no asyncio: the server feeds
whatever it reads to a `Decoder` and writes what the `encode_*` functions return, so every
framing rule is tested with bytes (tests/proxy/test_codec.py).

Values (a column's text or binary form, a Bind parameter's Python value) are in values.py; the
client side of the protocol (what the tests send) is in tests/proxy/wire.py.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from dpsql.errors import NotSupportedError, ProgramLimitExceeded, ProtocolViolation

PROTOCOL_3 = 196608            # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP_BYTES = 10_000     # as PostgreSQL: a startup packet is small

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_HEAD = struct.Struct("!ci")


# -- frontend messages ------------------------------------------------------------------------------

# What reading the stream can raise: the connection's framing or startup is unusable (a
# ProtocolViolation, an unsupported protocol version, a message over the size limit).
STREAM_ERRORS = (ProtocolViolation, NotSupportedError, ProgramLimitExceeded)

@dataclass(frozen=True, slots=True)
class Startup:
    major: int
    minor: int
    params: dict[str, str]


@dataclass(frozen=True, slots=True)
class SSLRequest:
    pass


@dataclass(frozen=True, slots=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True, slots=True)
class CancelRequest:
    pid: int
    secret: int


@dataclass(frozen=True, slots=True)
class Query:
    sql: str


@dataclass(frozen=True, slots=True)
class Parse:
    name: str
    sql: str
    param_oids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Describe:
    kind: str          # 'S' statement or 'P' portal
    name: str


@dataclass(frozen=True, slots=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True, slots=True)
class Close:
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Sync:
    pass


@dataclass(frozen=True, slots=True)
class Flush:
    pass


@dataclass(frozen=True, slots=True)
class Terminate:
    pass


@dataclass(frozen=True, slots=True)
class Password:
    """A 'p' message: PasswordMessage, SASLInitialResponse or SASLResponse (the body is
    read by the state the authentication is in; see parse_sasl_initial)."""
    body: bytes


@dataclass(frozen=True, slots=True)
class Unknown:
    type: str
    body: bytes


class _Reader:
    """Reads the fields of one message body; any overrun is a ProtocolViolation."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str):
        self.buf, self.pos, self.what = buf, 0, what

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolViolation(f"malformed {self.what} message: shorter than its fields")

    def int16(self) -> int:
        self._need(2)
        v = _I16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return v

    def int32(self) -> int:
        self._need(4)
        v = _I32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def uint32(self) -> int:
        self._need(4)
        v = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def cstring(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation(f"malformed {self.what} message: a string lacks its terminator")
        raw = self.buf[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation(f"malformed {self.what} message: a string is not valid UTF-8") from None

    def bytes(self, n: int) -> bytes:
        self._need(n)
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def count(self) -> int:
        n = self.int16()
        if n < 0:
            raise ProtocolViolation(f"malformed {self.what} message: a negative count")
        return n

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise ProtocolViolation(f"malformed {self.what} message: extra bytes after its fields")


def parse_startup(body: bytes):
    """A startup-phase packet's body (after its length): Startup, SSLRequest, GSSENCRequest or
    CancelRequest. A protocol other than 3.x raises NotSupportedError (0A000)."""
    r = _Reader(body, "startup")
    code = r.int32()
    if code == SSL_REQUEST:
        r.end()
        return SSLRequest()
    if code == GSSENC_REQUEST:
        r.end()
        return GSSENCRequest()
    if code == CANCEL_REQUEST:
        pid, secret = r.int32(), r.int32()
        r.end()
        return CancelRequest(pid, secret)
    major, minor = code >> 16, code & 0xFFFF
    if major != 3:
        raise NotSupportedError(f"unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0")
    params: dict[str, str] = {}
    while True:
        key = r.cstring()
        if not key:
            break
        params[key] = r.cstring()
    r.end()
    return Startup(major, minor, params)


def startup_length(head: bytes) -> int:
    """The body length of a startup packet from its first 4 bytes; ProtocolViolation if absurd
    (which is also what garbage sent before a startup packet looks like)."""
    n = _I32.unpack(head)[0]
    if not 8 <= n <= MAX_STARTUP_BYTES:
        raise ProtocolViolation("invalid startup packet length")
    return n - 4


def parse_message(kind: str, body: bytes):
    """One frontend message of the normal phase (after startup) from its type and body."""
    r = _Reader(body, _NAMES.get(kind, "unknown"))
    if kind == "Q":
        sql = r.cstring()
        r.end()
        return Query(sql)
    if kind == "P":
        name, sql = r.cstring(), r.cstring()
        oids = tuple(r.uint32() for _ in range(r.count()))
        r.end()
        return Parse(name, sql, oids)
    if kind == "B":
        portal, stmt = r.cstring(), r.cstring()
        fmts = tuple(r.int16() for _ in range(r.count()))
        values = []
        for _ in range(r.count()):
            n = r.int32()
            values.append(None if n == -1 else r.bytes(n))
        results = tuple(r.int16() for _ in range(r.count()))
        r.end()
        for f in fmts + results:
            if f not in (0, 1):
                raise ProtocolViolation(f"unsupported format code {f}")
        return Bind(portal, stmt, fmts, tuple(values), results)
    if kind == "D" or kind == "C":
        what = r.bytes(1).decode("latin-1")
        name = r.cstring()
        r.end()
        if what not in ("S", "P"):
            raise ProtocolViolation(f"invalid {'DESCRIBE' if kind == 'D' else 'CLOSE'} message subtype")
        return Describe(what, name) if kind == "D" else Close(what, name)
    if kind == "E":
        portal = r.cstring()
        rows = r.int32()
        r.end()
        return Execute(portal, rows)
    if kind == "S":
        r.end()
        return Sync()
    if kind == "H":
        r.end()
        return Flush()
    if kind == "X":
        r.end()
        return Terminate()
    if kind == "p":
        return Password(bytes(body))
    return Unknown(kind, bytes(body))


_NAMES = {"Q": "Query", "P": "Parse", "B": "Bind", "D": "Describe", "C": "Close", "E": "Execute", "S": "Sync",
          "H": "Flush", "X": "Terminate", "p": "password"}


def parse_sasl_initial(body: bytes) -> tuple[str, bytes]:
    """SASLInitialResponse: (mechanism, client-first-message)."""
    r = _Reader(body, "SASLInitialResponse")
    mech = r.cstring()
    n = r.int32()
    data = b"" if n == -1 else r.bytes(n)
    r.end()
    return mech, data


class Decoder:
    """Frames the normal-phase byte stream: feed bytes, take (type, body) pairs.

    A length below 4 or above `max_message_bytes` is a ProtocolViolation: the stream
    cannot be resynchronised after it, so the server reports it and closes."""

    def __init__(self, max_message_bytes: int = 16 * 1024 * 1024):
        self.max = max_message_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def header(self) -> tuple[str, int] | None:
        """The next message's (type, body length) once its 5 header bytes are here."""
        if len(self._buf) < 5:
            return None
        kind, n = _HEAD.unpack_from(self._buf, 0)
        if n < 4:
            raise ProtocolViolation("invalid message length")
        if n - 4 > self.max:
            raise ProgramLimitExceeded(f"message of {n - 4} bytes exceeds the limit of {self.max} bytes")
        return kind.decode("latin-1"), n - 4

    def next(self) -> tuple[str, bytes] | None:
        h = self.header()
        if h is None or len(self._buf) < 5 + h[1]:
            return None
        kind, n = h
        body = bytes(self._buf[5:5 + n])
        del self._buf[:5 + n]
        return kind, body


# -- backend messages -------------------------------------------------------------------------------

def _msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + _I32.pack(len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.replace("\0", "").encode("utf-8") + b"\0"


def auth_ok() -> bytes:
    return _msg(b"R", _I32.pack(0))


def auth_sasl(mechanisms: list[str]) -> bytes:
    return _msg(b"R", _I32.pack(10) + b"".join(_cstr(m) for m in mechanisms) + b"\0")


def auth_sasl_continue(data: bytes) -> bytes:
    return _msg(b"R", _I32.pack(11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return _msg(b"R", _I32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return _msg(b"S", _cstr(name) + _cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return _msg(b"K", _I32.pack(pid) + _I32.pack(secret))


def negotiate_protocol_version(minor: int, unrecognized: list[str]) -> bytes:
    return _msg(b"v", _I32.pack(minor) + _I32.pack(len(unrecognized)) + b"".join(_cstr(o) for o in unrecognized))


def ready_for_query(status: str) -> bytes:
    return _msg(b"Z", status.encode("ascii"))


@dataclass(frozen=True, slots=True)
class Field:
    """One column of a RowDescription."""
    name: str
    type_oid: int
    type_size: int = -1
    type_modifier: int = -1
    format: int = 0
    table_oid: int = 0
    column: int = 0


def row_description(fields: list[Field]) -> bytes:
    parts = [_I16.pack(len(fields))]
    for f in fields:
        parts.append(_cstr(f.name) + struct.pack("!iHIhih", f.table_oid, f.column, f.type_oid,
                                                  f.type_size, f.type_modifier, f.format))
    return _msg(b"T", b"".join(parts))


def data_row(values: list[bytes | None]) -> bytes:
    parts = [_I16.pack(len(values))]
    for v in values:
        parts.append(b"\xff\xff\xff\xff" if v is None else _I32.pack(len(v)) + v)
    return _msg(b"D", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return _msg(b"C", _cstr(tag))


def _fields(fields: dict[str, str]) -> bytes:
    return b"".join(k.encode("ascii") + _cstr(v) for k, v in fields.items() if v is not None) + b"\0"


def error_response(fields: dict[str, str]) -> bytes:
    return _msg(b"E", _fields(fields))


def notice_response(fields: dict[str, str]) -> bytes:
    return _msg(b"N", _fields(fields))


def parameter_description(oids: list[int]) -> bytes:
    return _msg(b"t", _I16.pack(len(oids)) + b"".join(_U32.pack(o) for o in oids))


PARSE_COMPLETE = _msg(b"1")
BIND_COMPLETE = _msg(b"2")
CLOSE_COMPLETE = _msg(b"3")
NO_DATA = _msg(b"n")
EMPTY_QUERY = _msg(b"I")
PORTAL_SUSPENDED = _msg(b"s")


# -- COPY ... TO STDOUT (the server side of psql's \copy (query) TO ...)

def copy_out_response(columns: int, fmt: int = 0) -> bytes:
    """CopyOutResponse: overall format (0 text) and each column's format."""
    return _msg(b"H", bytes([fmt]) + _I16.pack(columns) + _I16.pack(fmt) * columns)


def copy_data(data: bytes) -> bytes:
    return _msg(b"d", data)


COPY_DONE = b"c\x00\x00\x00\x04"
