"""PostgreSQL's value formats, sans-IO: a result value in the text or binary form of its
column's type OID (`encode_value`, `row_encoder`), a Bind parameter (text or binary, by the OID
Parse declared) as the Python value the Session binds as a literal (`decode_param`).
"""
from __future__ import annotations

import datetime as _dt
import math
import struct
import uuid as _uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from dpsql.errors import InvalidBinaryRepresentation, InvalidTextRepresentation

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")


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
