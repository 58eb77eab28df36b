"""Raw wire-protocol helpers shared by the proxy tests that speak to `dpsql serve` byte by byte."""
from __future__ import annotations

import socket
import struct


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
