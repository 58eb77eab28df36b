"""Run-time pieces of the reconstruction defence: the answer cache's key and codec, and the audit log.

The cache: an identical repeat of a private query (same normalised SQL with its parameters bound,
same epsilon, delta and mechanism, same database) gets the answer released the first time, free
of charge. Averaging k noisy answers to one question divides the noise by sqrt(k); repeating the
released answer gives the analyst nothing new, so it costs nothing (post-processing, Dwork & Roth
2014, Prop. 2.1). The released rows are stored in the ledger (per analyst, for the policy's
``[reconstruction] cache_lifetime``); this module turns them into text and back, exactly.

The audit log: one JSON object per line, appended, for every query flagged as selecting people by
identity (charged with its surcharge, answered from the cache, or refused by the cap). Each line
is written with one ``write`` on a file opened ``O_APPEND`` and then fsync'd, so lines from
several processes never interleave and a line that was written survives a crash.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

from dpsql.errors import OperationalError

__all__ = ["AuditLog", "answer_key", "decode", "encode"]


def answer_key(target: str, query: str, epsilon: float, delta: float, mechanism: str) -> str:
    """The cache key of a private query: a hash of everything that decides its released answer."""
    text = json.dumps([target, query, repr(float(epsilon)), repr(float(delta)), mechanism],
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def encode(value: Any) -> str:
    """JSON text of a structure of released values; dates, times, decimals and bytes keep their type."""
    return json.dumps(_tag(value), separators=(",", ":"), allow_nan=False)


def decode(text: str) -> Any:
    return _untag(json.loads(text))


def _tag(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else {"$float": repr(v)}
    if isinstance(v, Decimal):
        return {"$dec": str(v)}
    if isinstance(v, _dt.datetime):
        return {"$ts": v.isoformat()}
    if isinstance(v, _dt.date):
        return {"$date": v.isoformat()}
    if isinstance(v, _dt.time):
        return {"$time": v.isoformat()}
    if isinstance(v, _dt.timedelta):
        return {"$td": [v.days, v.seconds, v.microseconds]}
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(v).hex()}
    if isinstance(v, (list, tuple)):
        return {"$tuple": [_tag(x) for x in v]} if isinstance(v, tuple) else [_tag(x) for x in v]
    if isinstance(v, dict):
        return {"$dict": [[_tag(k), _tag(x)] for k, x in v.items()]}
    item = getattr(v, "item", None)        # numpy scalars
    if callable(item):
        return _tag(item())
    raise TypeError(f"cannot keep a {type(v).__name__} in the answer cache")


def _untag(v: Any) -> Any:
    if isinstance(v, list):
        return [_untag(x) for x in v]
    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "$float":
        return float(x)
    if tag == "$dec":
        return Decimal(x)
    if tag == "$ts":
        return _dt.datetime.fromisoformat(x)
    if tag == "$date":
        return _dt.date.fromisoformat(x)
    if tag == "$time":
        return _dt.time.fromisoformat(x)
    if tag == "$td":
        return _dt.timedelta(days=x[0], seconds=x[1], microseconds=x[2])
    if tag == "$bytes":
        return bytes.fromhex(x)
    if tag == "$tuple":
        return tuple(_untag(y) for y in x)
    if tag == "$dict":
        return {_untag(k): _untag(y) for k, y in x}
    raise ValueError(f"unknown tag {tag!r} in the answer cache")


class AuditLog:
    """Append-only JSON-lines audit of the reconstruction defence's decisions."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()

    def write(self, event: str, analyst: str, **fields: Any) -> None:
        """Append one line: time (UTC, ISO 8601), analyst, event, then the given fields.
        A failure raises OperationalError: the caller releases nothing it could not audit."""
        record = {"time": _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds"),
                  "analyst": analyst, "event": event, **fields}
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as err:
                raise OperationalError(f"audit log {self.path}: cannot write: {err.strerror or err}") from None

    def read(self) -> list[dict]:
        """Every record, oldest first (for admin tools and tests)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]
