"""Sans-IO codec for the PostgreSQL frontend/backend protocol, version 3.0.

Bytes in, messages out; messages in, bytes out. No sockets and no asyncio: the server feeds
whatever it reads to a `Decoder` and writes what the `encode_*` functions return, so every
framing rule is tested with bytes (tests/proxy/test_codec.py).

Values: `encode_value` turns a Python value from a Result into the text or binary form of the
column's type OID; `decode_param` turns a Bind parameter (text or binary, by the OID Parse
declared) into the Python value the Session binds as a literal.
"""
from __future__ import annotations

import datetime as _dt
import math
import struct
import uuid as _uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from dpsql.errors import (
    InvalidBinaryRepresentation,
    InvalidTextRepresentation,
    NotSupportedError,
    ProgramLimitExceeded,
    ProtocolViolation,
)

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

    @property
    def buffered(self) -> int:
        return len(self._buf)


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


# -- client-side helpers (tests and the fuzzer build frontend messages with these) --------------------

def frontend(kind: str, body: bytes = b"") -> bytes:
    return _msg(kind.encode("latin-1"), body)


def startup_message(params: dict[str, str], version: int = PROTOCOL_3) -> bytes:
    body = _I32.pack(version) + b"".join(_cstr(k) + _cstr(v) for k, v in params.items()) + b"\0"
    return _I32.pack(len(body) + 4) + body


def query_message(sql: str) -> bytes:
    return frontend("Q", _cstr(sql))


def parse_backend(data: bytes) -> list[tuple[str, bytes]]:
    """Split a backend byte stream into (type, body) pairs (for tests)."""
    out, i = [], 0
    while i + 5 <= len(data):
        kind, n = _HEAD.unpack_from(data, i)
        out.append((kind.decode("latin-1"), bytes(data[i + 5:i + 1 + n])))
        i += 1 + n
    return out


# -- values -----------------------------------------------------------------------------------------

_EPOCH_DATE = _dt.date(2000, 1, 1)
_EPOCH = _dt.datetime(2000, 1, 1)
_EPOCH_TZ = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)

INT_OIDS = {20: "!q", 21: "!h", 23: "!i", 26: "!I"}
FLOAT_OIDS = {700: "!f", 701: "!d"}
TEXT_OIDS = {0, 18, 19, 25, 705, 1042, 1043}


def format_float(v: float) -> str:
    """Shortest round-trip text, as PostgreSQL prints float8 (extra_float_digits >= 1)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == int(v) and abs(v) < 1e15:
        return "-0" if v == 0 and math.copysign(1, v) < 0 else str(int(v))
    s = repr(v)
    if "e" in s:
        mant, exp = s.split("e")
        mant = mant.removesuffix(".0")
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-").rjust(2, "0")
        s = f"{mant}e{sign}{digits}"
    return s


def format_text(v: object) -> str:
    """A Python value in PostgreSQL's text output format."""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, Decimal):
        if v.is_nan():
            return "NaN"
        if v.is_infinite():
            return "Infinity" if v > 0 else "-Infinity"
        return format(v, "f")
    if isinstance(v, _dt.datetime):
        s = v.isoformat(sep=" ")
        if v.tzinfo is not None and s.endswith(":00") and s[-6] in "+-":
            s = s[:-3]
        return s
    if isinstance(v, (_dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    if isinstance(v, _dt.timedelta):
        return _format_interval(v)
    return str(v)


def _format_interval(v: _dt.timedelta) -> str:
    secs = v.seconds + v.microseconds / 1e6
    h, rem = divmod(v.seconds, 3600)
    m, s = divmod(rem, 60)
    frac = f".{v.microseconds:06d}" if v.microseconds else ""
    days = f"{v.days} day{'s' if abs(v.days) != 1 else ''} " if v.days else ""
    return f"{days}{h:02d}:{m:02d}:{s:02d}{frac}" if secs or not days else days.strip()


def encode_value(v: object, oid: int, fmt: int) -> bytes | None:
    """One result value in the column's wire format (0 text, 1 binary)."""
    if v is None:
        return None
    if fmt == 0:
        return format_text(v).encode("utf-8")
    return encode_binary(v, oid)


def _encode_text(v: object) -> bytes:
    """encode_value(v, oid, 0) for a value that is not None: the common types first."""
    t = type(v)
    if t is str:
        return v.encode("utf-8")            # type: ignore[union-attr]
    if t is float:
        return format_float(v).encode("ascii")    # type: ignore[arg-type]
    if t is int:
        return str(v).encode("ascii")
    return format_text(v).encode("utf-8")


def value_encoder(oid: int, fmt: int) -> Callable[[object], bytes]:
    """encode_value(v, oid, fmt) for values that are not None, with the choice by column made
    once (a result's rows all share their columns' types and formats)."""
    if fmt == 0:
        return _encode_text
    if oid in INT_OIDS:
        pack = struct.Struct(INT_OIDS[oid]).pack
        return lambda v: pack(int(v))          # type: ignore[call-overload]
    if oid in FLOAT_OIDS:
        pack = struct.Struct(FLOAT_OIDS[oid]).pack
        return lambda v: pack(float(v))        # type: ignore[arg-type]
    return lambda v: encode_binary(v, oid)


_NULL = b"\xff\xff\xff\xff"


def row_encoder(spec: list[tuple[int, int]]) -> Callable[[tuple], bytes]:
    """A function from a row (a value per column) to its DataRow message, for columns of
    (type oid, format) `spec`: data_row([encode_value(v, oid, fmt) ...]) without choosing each
    value's encoding again (a grouped answer's rows cost a third as much to send)."""
    encoders = [value_encoder(oid, fmt) for oid, fmt in spec]
    head = _I16.pack(len(encoders))
    length = _I32.pack

    def encode(row: tuple) -> bytes:
        parts = [head]
        for v, enc in zip(row, encoders):
            if v is None:
                parts.append(_NULL)
            else:
                b = enc(v)
                parts.append(length(len(b)))
                parts.append(b)
        body = b"".join(parts)
        return b"D" + length(len(body) + 4) + body
    return encode


def encode_binary(v: object, oid: int) -> bytes:
    if oid in INT_OIDS:
        return struct.pack(INT_OIDS[oid], int(v))
    if oid in FLOAT_OIDS:
        return struct.pack(FLOAT_OIDS[oid], float(v))
    if oid == 16:
        return b"\x01" if v else b"\x00"
    if oid == 1700:
        return encode_numeric(v if isinstance(v, Decimal) else Decimal(format_text(v)))
    if oid == 1082:
        if isinstance(v, _dt.datetime):
            v = v.date()
        return _I32.pack((v - _EPOCH_DATE).days)
    if oid in (1114, 1184):
        if isinstance(v, _dt.date) and not isinstance(v, _dt.datetime):
            v = _dt.datetime(v.year, v.month, v.day)
        if v.tzinfo is not None:
            d = v - _EPOCH_TZ
        else:
            d = v - _EPOCH
        return struct.pack("!q", (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds)
    if oid == 1083:
        return struct.pack("!q", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)
    if oid == 1186:
        return struct.pack("!qii", (v.seconds * 1_000_000 + v.microseconds), v.days, 0)
    if oid == 17:
        return bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else str(v).encode("utf-8")
    if oid == 2950:
        return (v if isinstance(v, _uuid.UUID) else _uuid.UUID(str(v))).bytes
    return format_text(v).encode("utf-8")


def text_to_binary(text: str | None, oid: int) -> bytes | None:
    """A value already in PostgreSQL text format (catalog replies) in binary format."""
    if text is None:
        return None
    return encode_binary(decode_text(text, oid), oid)


_NBASE = 10000


def encode_numeric(d: Decimal) -> bytes:
    """numeric's binary form: ndigits, weight, sign, dscale, base-10000 digits."""
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if d.is_infinite():
        return struct.pack("!hhHh", 0, 0, 0xD000 if d > 0 else 0xF000, 0)
    sign, digits, exp = d.as_tuple()
    dscale = max(0, -exp)
    # integer part and fraction part as decimal digit strings
    ds = "".join(map(str, digits))
    if exp >= 0:
        int_part, frac_part = ds + "0" * exp, ""
    else:
        k = -exp
        ds = ds.rjust(k + 1, "0")
        int_part, frac_part = ds[:-k], ds[-k:]
    int_part = int_part.lstrip("0")
    int_groups = []
    if int_part:
        pad = (-len(int_part)) % 4
        int_part = "0" * pad + int_part
        int_groups = [int(int_part[i:i + 4]) for i in range(0, len(int_part), 4)]
    frac_groups = []
    if frac_part:
        frac_part = frac_part + "0" * ((-len(frac_part)) % 4)
        frac_groups = [int(frac_part[i:i + 4]) for i in range(0, len(frac_part), 4)]
    groups = int_groups + frac_groups
    weight = len(int_groups) - 1
    while groups and groups[0] == 0:       # leading zero groups (value < 1)
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(f"!hhHh{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups)


def decode_numeric(b: bytes) -> Decimal:
    if len(b) < 8:
        raise ValueError("short numeric")
    n, weight, sign, dscale = struct.unpack_from("!hhHh", b)
    if sign == 0xC000:
        return Decimal("NaN")
    if sign == 0xD000:
        return Decimal("Infinity")
    if sign == 0xF000:
        return Decimal("-Infinity")
    if len(b) != 8 + 2 * n or n < 0:
        raise ValueError("bad numeric length")
    groups = struct.unpack_from(f"!{n}H", b, 8)
    value = 0
    for g in groups:
        if g >= _NBASE:
            raise ValueError("bad numeric digit")
        value = value * _NBASE + g
    exp10 = 4 * (weight - n + 1)
    d = Decimal(value).scaleb(exp10)
    d = -d if sign == 0x4000 else d
    return d.quantize(Decimal(1).scaleb(-dscale)) if dscale >= 0 and d == d else d


_TRUE = {"t", "true", "1", "y", "yes", "on"}
_FALSE = {"f", "false", "0", "n", "no", "off"}


def decode_text(s: str, oid: int) -> object:
    """A text-format value of type `oid` as a Python value (ValueError if it does not parse)."""
    if oid in INT_OIDS:
        return int(s.strip())
    if oid in FLOAT_OIDS:
        t = s.strip().lower()
        if t in ("nan", "infinity", "-infinity", "inf", "-inf"):
            return float(t.replace("infinity", "inf"))
        return float(t)
    if oid == 1700:
        try:
            return Decimal(s.strip())
        except InvalidOperation:
            raise ValueError("not a number") from None
    if oid == 16:
        t = s.strip().lower()
        if t in _TRUE:
            return True
        if t in _FALSE:
            return False
        raise ValueError("not a boolean")
    if oid == 1082:
        return _dt.date.fromisoformat(s.strip())
    if oid in (1114, 1184):
        t = s.strip()
        if len(t) > 3 and t[-3] in "+-" and t[-2:].isdigit() and ":" not in t[-3:]:
            t += ":00"
        return _dt.datetime.fromisoformat(t)
    if oid == 1083:
        return _dt.time.fromisoformat(s.strip())
    return s


def decode_param(raw: bytes | None, oid: int, fmt: int) -> object:
    """One Bind parameter as a Python value; ProtocolViolation (22P02/22P03) if it is not one."""
    if raw is None:
        return None
    try:
        if fmt == 0:
            return decode_text(raw.decode("utf-8"), oid)
        return _decode_binary(raw, oid)
    except (ValueError, struct.error, UnicodeDecodeError, OverflowError):
        cls = InvalidTextRepresentation if fmt == 0 else InvalidBinaryRepresentation
        raise cls(f"parameter is not a valid {'text' if fmt == 0 else 'binary'} value of type oid {oid}") from None


def _decode_binary(b: bytes, oid: int) -> object:
    if oid in INT_OIDS:
        return struct.unpack(INT_OIDS[oid], b)[0]
    if oid in FLOAT_OIDS:
        return struct.unpack(FLOAT_OIDS[oid], b)[0]
    if oid == 16:
        if len(b) != 1:
            raise ValueError("bad bool")
        return b != b"\x00"
    if oid == 1700:
        return decode_numeric(b)
    if oid == 1082:
        return _EPOCH_DATE + _dt.timedelta(days=struct.unpack("!i", b)[0])
    if oid == 1114:
        return _EPOCH + _dt.timedelta(microseconds=struct.unpack("!q", b)[0])
    if oid == 1184:
        return _EPOCH_TZ + _dt.timedelta(microseconds=struct.unpack("!q", b)[0])
    if oid == 17:
        return bytes(b)
    if oid == 2950:
        return str(_uuid.UUID(bytes=b))
    return b.decode("utf-8")


# -- COPY ... TO STDOUT (the server side of psql's \copy (query) TO ...)

def copy_out_response(columns: int, fmt: int = 0) -> bytes:
    """CopyOutResponse: overall format (0 text) and each column's format."""
    return _msg(b"H", bytes([fmt]) + _I16.pack(columns) + _I16.pack(fmt) * columns)


def copy_data(data: bytes) -> bytes:
    return _msg(b"d", data)


COPY_DONE = b"c\x00\x00\x00\x04"
