"""Lexical scanning of SQL text shared by the parser front and the shells.

Finds where a quoted string ('...' with '' escapes), a quoted identifier ("..."), a
dollar-quoted string ($tag$...$tag$) or a comment (-- to end of line, /* ... */) that
starts at a position ends, so that callers can strip comments or split statements on ';'
without being fooled by markers inside quotes; and the explicit collation an engine reports
with a type name. No dpsql imports: a leaf, like errors.
"""
from __future__ import annotations

import re
from collections.abc import Callable

_DOLLAR = re.compile(r"\$([A-Za-z_]\w*)?\$")


def skip(text: str, i: int) -> tuple[str, int, bool]:
    """What starts at i: ("string" | "comment" | "code", end, terminated).

    For a string or comment, end is the index just past it (len(text) when it is
    unterminated, with terminated False); for code, end == i + 1.
    """
    n = len(text)
    c = text[i]
    if c in "'\"":
        j = i + 1
        while j < n:
            if text[j] == c:
                if j + 1 < n and text[j + 1] == c:      # a doubled quote inside the quotes
                    j += 2
                    continue
                return "string", j + 1, True
            j += 1
        return "string", n, False
    if text.startswith("--", i):
        j = text.find("\n", i)
        return "comment", (n if j < 0 else j), True
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return ("comment", n, False) if j < 0 else ("comment", j + 2, True)
    if c == "$" and (m := _DOLLAR.match(text, i)):
        tag = m.group(0)
        j = text.find(tag, m.end())
        return ("string", n, False) if j < 0 else ("string", j + len(tag), True)
    return "code", i + 1, True


_SPECIAL = re.compile(r"['\"$]|--|/\*")


def strip_comments(text: str) -> str:
    """Replace comments outside quotes with a space; quotes are kept whole."""
    return _map_comments(text, lambda comment: " ")


def _map_comments(text: str, replace: Callable[[str], str]) -> str:
    """The text with each comment outside quotes replaced by replace(comment)."""
    if not _SPECIAL.search(text):            # the common case: nothing to skip
        return text
    out, i, n = [], 0, len(text)
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        kind, end, _ = skip(text, m.start())
        chunk = text[m.start():end]
        out.append(replace(chunk) if kind == "comment" else chunk)
        i = end
    return "".join(out)


def split_statements(text: str) -> tuple[list[str], str]:
    """Complete statements (each ending with ';', which is kept) and the unfinished rest.

    A ';' inside quotes or comments does not end a statement; an unterminated string or
    comment leaves everything from the last statement on unfinished.
    """
    out: list[str] = []
    start, i, n = 0, 0, len(text)
    while i < n:
        kind, end, terminated = skip(text, i)
        if not terminated:
            return out, text[start:]
        if kind == "code" and text[i] == ";":
            stmt = text[start:end].strip()
            if stmt != ";":
                out.append(stmt)
            start = end
        i = end
    return out, text[start:]


def only_comments(text: str) -> bool:
    """Whether text holds nothing but whitespace and comments."""
    return not strip_comments(text).strip()


def blank_comments(text: str) -> str:
    """The text with each comment outside quotes replaced by spaces of the same length (its
    newlines kept), so that a character's offset is the same in both: error positions point
    into the text the analyst wrote."""
    return _map_comments(text, lambda comment: "".join(c if c == "\n" else " " for c in comment))


def unterminated(text: str) -> tuple[int, str] | None:
    """(offset, kind) of a quoted string, quoted identifier or comment that never ends, or None."""
    i, n = 0, len(text)
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            return None
        _, end, done = skip(text, m.start())
        if not done:
            what = {"'": "quoted string", '"': "quoted identifier", "$": "dollar-quoted string"}.get(
                text[m.start()], "/* comment")
            return m.start(), what
        i = max(end, m.start() + 1)
    return None


def code_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) spans of the text outside quotes and comments."""
    out, i, n = [], 0, len(text)
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            out.append((i, n))
            break
        kind, end, _ = skip(text, m.start())
        if kind == "code":
            out.append((i, end))
        else:
            out.append((i, m.start()))
        i = end
    return [(a, b) for a, b in out if b > a]


# -- type names

_COLLATE = re.compile(r"\s+collate\s+(\S.*)$", re.IGNORECASE)


def collation(sql_type: str) -> str | None:
    """The explicit collation an engine reports with a column's type (PostgreSQL's engine adds
    ` COLLATE <name>` for one that is not the database's default), or None."""
    m = _COLLATE.search(sql_type)
    return m.group(1) if m else None


def bare_type(sql_type: str) -> str:
    """The type name without an explicit collation."""
    return _COLLATE.sub("", sql_type)
