"""Where a key is in a policy's TOML text: its line, for messages (tomllib gives no positions).

A small second reader beside tomllib, for line numbers only: it follows table headers, dotted keys
and inline tables well enough to find the line that sets a key (or its nearest enclosing table).
The policy's meaning always comes from tomllib.
"""
from __future__ import annotations

import re

__all__ = ["locate"]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY_PART = re.compile(rf"\s*({_BARE}|{_QUOTED})\s*")


def locate(text: str, key: str) -> int | None:
    """The 1-based line that defines a dotted key path in TOML text, or None.

    `key` is a path such as ``tables.people.columns.age.lower``. Table headers
    (``[tables.people.columns]``, ``[[...]]``), dotted keys (``a.b = 1``) and inline tables
    (``age = { lower = 0, upper = 1 }``, also nested) are followed. If the path itself is not
    written (a missing key), the line of its nearest enclosing table or key is returned, so a
    message about ``budget.epsilon`` points at ``[budget]``. A line scanner, not a parser: it
    is meant for valid TOML (tomllib reports its own errors' lines); multi-line strings and
    arrays are skipped over.
    """
    want = tuple(key.split(".")) if key else ()
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    pending: str | None = None             # closing quote of a multi-line string being skipped
    depth = 0                              # bracket depth of a multi-line array/inline table
    for n, line in enumerate(text.splitlines(), start=1):
        if pending is not None:
            if pending in line:
                pending = None
            continue
        if depth > 0:
            depth = max(0, depth + _depth(line))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            inner = stripped[2:] if stripped.startswith("[[") else stripped[1:]
            parts, rest = _key_path(inner)
            if parts is not None and rest.lstrip().startswith("]"):
                table = parts
                for i in range(1, len(parts) + 1):
                    found.setdefault(parts[:i], n)
            continue
        parts, rest = _key_path(line)
        if parts is None or not rest.startswith("="):
            continue
        path = table + parts
        for i in range(len(table) + 1, len(path) + 1):
            found.setdefault(path[:i], n)
        value = rest[1:].lstrip()
        for triple in ('"""', "'''"):
            if value.startswith(triple) and value.count(triple) == 1:
                pending = triple
        if value.startswith("{"):
            _inline_keys(value, path, n, found)
        if pending is None and value[:1] in "[{":
            depth = max(0, _depth(value))
    for i in range(len(want), 0, -1):
        if want[:i] in found:
            return found[want[:i]]
    return None


def _key_path(text: str) -> tuple[tuple[str, ...] | None, str]:
    """Parse a (dotted) key at the start of text: (parts, the rest) or (None, text)."""
    parts, pos = [], 0
    while True:
        m = _KEY_PART.match(text, pos)
        if m is None:
            return None, text
        tok = m.group(1)
        parts.append(tok[1:-1] if tok[0] in "\"'" else tok)
        pos = m.end()
        if text[pos:pos + 1] != ".":
            return tuple(parts), text[pos:]
        pos += 1


def _inline_keys(value: str, path: tuple[str, ...], line: int, found: dict) -> None:
    """Record the keys of an inline table (and nested ones) written on this line."""
    stack, i, expect_key = [path], 1, True
    while i < len(value) and stack:
        ch = value[i]
        if ch in "\"'":
            end = _string_end(value, i)
            if expect_key:
                parts, rest = _key_path(value[i:])
                if parts is not None and rest.startswith("="):
                    i = len(value) - len(rest)
                    continue
            i = end
            continue
        if expect_key and not ch.isspace() and ch not in ",}":
            parts, rest = _key_path(value[i:])
            if parts is None or not rest.startswith("="):
                return
            full = stack[-1] + parts
            for k in range(len(stack[-1]) + 1, len(full) + 1):
                found.setdefault(full[:k], line)
            i = len(value) - len(rest) + 1
            expect_key = False
            rest_value = value[i:].lstrip()
            if rest_value.startswith("{"):
                stack.append(full)
                i = len(value) - len(rest_value) + 1
                expect_key = True
            continue
        if ch == "[":
            end = _array_end(value, i)
            if end is None:
                return
            i = end
            continue
        if ch == ",":
            expect_key = True
        elif ch == "}":
            stack.pop()
            expect_key = False
        i += 1


def _string_end(text: str, i: int) -> int:
    quote, j = text[i], i + 1
    while j < len(text):
        if quote == '"' and text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j + 1
        j += 1
    return len(text)


def _array_end(text: str, i: int) -> int | None:
    depth, j = 0, i
    while j < len(text):
        ch = text[j]
        if ch in "\"'":
            j = _string_end(text, j)
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _depth(text: str) -> int:
    """Net count of opening minus closing brackets and braces, outside strings and comments."""
    depth, j = 0, 0
    while j < len(text):
        ch = text[j]
        if ch in "\"'":
            j = _string_end(text, j)
            continue
        if ch == "#":
            break
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        j += 1
    return depth
