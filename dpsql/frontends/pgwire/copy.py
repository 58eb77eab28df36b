"""`COPY (query) TO STDOUT`: what psql sends for `\\copy (SELECT ...) TO file` (and `TO STDOUT`).

Only the COPY-out of a query's result is accepted: the query runs like any other statement (a
private query is charged and noised as usual; nothing else is read), and its released rows are
sent as CopyData in PostgreSQL's text or CSV format. COPY of a table (which would read its rows)
and COPY FROM (dpsql is read-only) are refused. Sans-IO: parse the statement, format the rows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dpsql.errors import NotSupportedError, QueryRejected
from dpsql.frontends.pgwire.values import format_text
from dpsql.sqltext import strip_comments

_COPY = re.compile(r"(?is)^\s*copy\s*\((.*)\)\s*to\s+stdout\s*(.*?)\s*;?\s*$")
_TOKEN = re.compile(r"'(?:[^']|'')*'|[^\s,()']+|,")


@dataclass(frozen=True)
class CopyOut:
    query: str
    csv: bool = False
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"


def parse(sql: str) -> CopyOut:
    """A COPY statement -> what to run and how to format it; refuses every other COPY."""
    text = strip_comments(sql).strip()
    m = _COPY.match(text)
    if m is None:
        if re.match(r"(?is)^\s*copy\b.*\bfrom\b\s+(stdin|'|\w)", text) and not re.search(r"(?is)\)\s*to\b", text):
            raise NotSupportedError("COPY FROM is not supported: dpsql is read-only")
        raise QueryRejected("COPY", "only COPY (query) TO STDOUT is supported (psql: \\copy (SELECT ...) TO file)",
                            "COPY of a whole table would read its rows; put an aggregate query in parentheses")
    query, opts = m.group(1).strip(), m.group(2).strip()
    if not query:
        raise QueryRejected("COPY ()", "COPY needs a query in parentheses")
    if opts.upper().startswith("WITH"):
        opts = opts[4:].strip()
    opts = opts.strip("()")
    csv = header = False
    delimiter, null = None, None
    tokens = [t for t in _TOKEN.findall(opts) if t not in (",",)]
    i = 0

    def value() -> str:
        nonlocal i
        if i < len(tokens) and tokens[i].upper() == "AS":
            i += 1
        if i >= len(tokens):
            raise QueryRejected("COPY options", "an option is missing its value")
        v = tokens[i]
        i += 1
        return v[1:-1].replace("''", "'") if v.startswith("'") else v
    while i < len(tokens):
        word = tokens[i].lower()
        i += 1
        fmt = value().lower() if word == "format" else word
        if fmt == "binary":
            raise NotSupportedError("COPY in binary format is not supported; use text or csv")
        if word == "format" and fmt not in ("text", "csv"):
            raise QueryRejected(f"COPY format {fmt}", "dpsql's COPY writes text or csv")
        if fmt == "csv":
            csv = True
        elif word == "format":
            csv = False
        elif word == "header":
            header = True
            if i < len(tokens) and tokens[i].lower() in ("true", "false", "on", "off", "0", "1", "match"):
                header = tokens[i].lower() not in ("false", "off", "0")
                i += 1
        elif word == "delimiter":
            delimiter = value()
        elif word == "null":
            null = value()
        elif word in ("encoding", "quote", "escape"):
            value()
        else:
            raise QueryRejected(f"COPY option {word}", "dpsql's COPY takes FORMAT, CSV, HEADER, DELIMITER and NULL")
    return CopyOut(query, csv, header, delimiter if delimiter is not None else ("," if csv else "\t"),
                   null if null is not None else ("" if csv else "\\N"))


def _text_field(v: str) -> str:
    return (v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r"))


def _csv_field(v: str, delimiter: str) -> str:
    if v == "" or any(c in v for c in (delimiter, '"', "\n", "\r")) or v != v.strip():
        return '"' + v.replace('"', '""') + '"'
    return v


def lines(spec: CopyOut, columns: list[str], rows: list[tuple], text_rows: bool = False) -> list[bytes]:
    """One CopyData payload per row (and a header line first in CSV with HEADER)."""
    out = []
    if spec.csv and spec.header:
        out.append((spec.delimiter.join(_csv_field(c, spec.delimiter) for c in columns) + "\n").encode())
    for row in rows:
        cells = []
        for v in row:
            if v is None:
                cells.append(spec.null)
                continue
            s = v if text_rows else format_text(v)
            cells.append(_csv_field(s, spec.delimiter) if spec.csv else _text_field(s))
        out.append((spec.delimiter.join(cells) + "\n").encode("utf-8"))
    return out
