"""The answer cache: an identical repeat of a private query gets the answer released the first time.

An identical repeat (same normalised SQL with its parameters bound, same epsilon, delta and
mechanism, same database) gets the answer released the first time, free of charge. Averaging k
noisy answers to one question divides the noise by sqrt(k); repeating the released answer gives
the analyst nothing new, so it costs nothing (post-processing, Dwork & Roth 2014, Prop. 2.1). The
released rows are stored in the ledger file's ``answers`` table (per analyst, for the policy's
``[reconstruction] cache_lifetime``); this module holds the key, the codec that turns them into
text and back, exactly, and the table's reads and writes (``Ledger.cached``/``remember`` hold the
connection).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sqlite3
import time
from decimal import Decimal
from typing import Any

__all__ = ["answer_key", "cached", "decode", "encode", "remember"]


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


def cached(db: sqlite3.Connection, analyst: str, key: str, max_age: float) -> str | None:
    """The payload released for this key within the last max_age seconds, else None."""
    row = db.execute("SELECT at, payload FROM answers WHERE analyst = ? AND key = ?", (analyst, key)).fetchone()
    if row is None or time.time() - row[0] > max_age:
        return None
    return row[1]


def remember(db: sqlite3.Connection, analyst: str, key: str, payload: str, max_age: float,
             max_bytes: int | None = None) -> bool:
    """Keep a released answer for identical repeats; drop this analyst's entries older than max_age.

    max_bytes caps the analyst's cached payloads (so no analyst can fill the shared ledger's
    disk): the oldest entries are dropped to make room, and a payload larger than the cap is
    not kept. Returns whether the answer was kept. The caller holds db exclusively."""
    now = time.time()
    size = len(payload.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        return False
    # Not fsync'd (synchronous=NORMAL for this one commit): a cache entry lost in a crash only
    # means the next repeat is charged again, the safe direction. The next charge's FULL commit
    # syncs the log, this entry included.
    # The connection is held throughout, so no charge can commit while it is NORMAL.
    db.execute("PRAGMA synchronous=NORMAL")
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM answers WHERE analyst = ? AND at < ?", (analyst, now - max_age))
            if max_bytes is not None:
                _make_room(db, analyst, key, size, max_bytes)
            db.execute("INSERT OR REPLACE INTO answers (analyst, key, at, payload) VALUES (?, ?, ?, ?)",
                       (analyst, key, now, payload))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    finally:
        db.execute("PRAGMA synchronous=FULL")
    return True


def _make_room(db: sqlite3.Connection, analyst: str, key: str, size: int, max_bytes: int) -> None:
    """Drop the key's old entry and the oldest entries that do not fit max_bytes beside size more."""
    db.execute("DELETE FROM answers WHERE analyst = ? AND key = ?", (analyst, key))
    kept = 0
    rows = db.execute("SELECT key, length(CAST(payload AS BLOB)) FROM answers WHERE analyst = ? "
                      "ORDER BY at DESC", (analyst,)).fetchall()
    for old_key, n in rows:      # newest first: keep what fits beside this answer
        if kept + n + size <= max_bytes:
            kept += n
        else:
            db.execute("DELETE FROM answers WHERE analyst = ? AND key = ?", (analyst, old_key))
