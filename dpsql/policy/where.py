"""Reporting a policy's problems: 'file: line N: key: problem', and the checks every section uses."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dpsql.errors import PolicyError
from dpsql.policy.locate import locate

__all__ = ["Where", "count", "fail", "missing", "number", "table", "unknown"]


class Where:
    """Formats 'file: key: problem' messages; 'file: line N: key: problem' when the TOML
    text is known and the key (or its nearest enclosing table) is found in it."""

    def __init__(self, source: str, text: str | None = None, problems: list[PolicyError] | None = None):
        self.source, self.text, self.problems = source, text, problems

    def error(self, key: str, problem: str) -> PolicyError:
        line = locate(self.text, key) if self.text is not None else None
        at = f"line {line}: " if line is not None else ""
        return PolicyError(f"policy {self.source}: {at}{key}: {problem}")

    def attempt(self, fn, *args, default=None):
        """fn(*args); when collecting problems (`dpsql policy check`), a PolicyError is recorded
        and `default` returned so that the rest of the policy is checked too."""
        if self.problems is None:
            return fn(*args)
        try:
            return fn(*args)
        except PolicyError as err:
            self.problems.append(err)
            return default


def number(where: Where, key: str, value: Any, *, positive: bool = False,
            allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise where.error(key, "must be finite")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise where.error(key, "must be positive" if not allow_zero else "must not be negative")
    return float(value)


def count(where: Where, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise where.error(key, "must be a whole number >= 1")
    if value > 1_000_000:
        raise where.error(key, "must be at most 1000000")
    return int(value)


def unknown(where: Where, prefix: str, given: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(given) - allowed)
    for key in extra:       # every one when collecting (policy check), else the first raises
        err = where.error(f"{prefix}{key}", f"unknown key (allowed here: {', '.join(sorted(allowed))})")
        if where.problems is None:
            raise err
        where.problems.append(err)


def table(where: Where, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(key, "must be a table")
    return value


def fail(where: Where, key: str, problem: str) -> None:
    raise where.error(key, problem)


def missing(where: Where, key: str):
    raise where.error(key, "missing section")
