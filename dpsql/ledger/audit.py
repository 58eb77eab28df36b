"""The audit log of the reconstruction defence.

One JSON object per line, appended, for every query flagged as selecting people by identity
(charged with its surcharge, answered from the cache, or refused by the cap). Each line is
written with one ``write`` on a file opened ``O_APPEND`` and then fsync'd, so lines from several
processes never interleave and a line that was written survives a crash.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from pathlib import Path
from typing import Any

from dpsql.errors import OperationalError

__all__ = ["AuditLog"]


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
