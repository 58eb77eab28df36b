"""The client side of the wire protocol, for the proxy tests that speak to `dpsql serve` byte by
byte: frontend messages, a backend stream split into messages, and SCRAM-SHA-256's client side.
(The server side, framing and values, is dpsql.frontends.pgwire.codec/values/auth.)"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import struct

from dpsql.frontends.pgwire.auth import salted_password
from dpsql.frontends.pgwire.codec import PROTOCOL_3

_I32 = struct.Struct("!i")
_HEAD = struct.Struct("!ci")


def _cstr(s: str) -> bytes:
    return s.replace("\0", "").encode("utf-8") + b"\0"


def frontend(kind: str, body: bytes = b"") -> bytes:
    """One frontend message of the normal phase: its type, length and body."""
    return kind.encode("latin-1") + _I32.pack(len(body) + 4) + body


def startup_message(params: dict[str, str], version: int = PROTOCOL_3) -> bytes:
    body = _I32.pack(version) + b"".join(_cstr(k) + _cstr(v) for k, v in params.items()) + b"\0"
    return _I32.pack(len(body) + 4) + body


def query_message(sql: str) -> bytes:
    return frontend("Q", _cstr(sql))


def parse_backend(data: bytes) -> list[tuple[str, bytes]]:
    """Split a backend byte stream into (type, body) pairs."""
    out, i = [], 0
    while i + 5 <= len(data):
        kind, n = _HEAD.unpack_from(data, i)
        out.append((kind.decode("latin-1"), bytes(data[i + 5:i + 1 + n])))
        i += 1 + n
    return out


def read_messages(sock: socket.socket, until: str = "Z", timeout: float = 20) -> list[tuple[str, bytes]]:
    """Backend messages up to and including the first of type `until` (or the connection's end)."""
    sock.settimeout(timeout)
    buf, out = b"", []
    while True:
        while len(buf) >= 5:
            kind, n = struct.unpack("!ci", buf[:5])
            if len(buf) < 1 + n:
                break
            out.append((kind.decode(), buf[5:1 + n]))
            buf = buf[1 + n:]
            if out[-1][0] == until:
                return out
        chunk = sock.recv(65536)
        if not chunk:
            return out
        buf += chunk


# -- SCRAM-SHA-256, the client side (RFC 5802, RFC 7677) ------------------------------------------------

def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _h(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _attrs(s: str) -> dict[str, str]:
    out = {}
    for part in s.split(","):
        if len(part) >= 2 and part[1] == "=":
            out.setdefault(part[0], part[2:])
    return out


class ScramClient:
    """The client side of SCRAM-SHA-256 (the server side is auth.ScramServer)."""

    def __init__(self, password: str, *, nonce: str | None = None):
        self.password = password
        self.nonce = nonce or _b64(secrets.token_bytes(18))
        self.first_bare = f"n=,r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode("ascii")

    def final(self, server_first: bytes) -> bytes:
        sf = server_first.decode("ascii")
        a = _attrs(sf)
        sp = salted_password(self.password, base64.b64decode(a["s"]), int(a["i"]))
        ck = _hmac(sp, b"Client Key")
        without = f"c=biws,r={a['r']}"
        self.auth_message = f"{self.first_bare},{sf},{without}".encode()
        sig = _hmac(_h(ck), self.auth_message)
        self.server_key = _hmac(sp, b"Server Key")
        return f"{without},p={_b64(bytes(x ^ y for x, y in zip(ck, sig)))}".encode("ascii")

    def verify(self, server_final: bytes) -> bool:
        expect = f"v={_b64(_hmac(self.server_key, self.auth_message))}".encode("ascii")
        return hmac.compare_digest(server_final, expect)
