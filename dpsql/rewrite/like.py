"""LIKE on Spark, in time linear in the row's length.

Spark evaluates LIKE (and ILIKE, which is LOWER(s) LIKE LOWER(p)) with java.util.regex, turning
each % into a greedy `.*` and matching with backtracking: a pattern with k separate %s takes time
of the order of n^k on a row of n characters that does not match. `%a%a%a%b` on a row of 300
a's takes seconds and on a longer one never ends, so whether a query returns at all says whether
some row holds a long text (the analyst chooses the pattern, the data decides the time). DuckDB
and PostgreSQL match LIKE without that blow-up.

So on Spark the rewrite sends `s RLIKE r` (ILIKE: `LOWER(s) RLIKE r` with r made from the lower-
cased pattern) where r matches exactly what the LIKE pattern matches but never backtracks into a
%: the pattern is split at its % runs into segments s0 % s1 % ... % sk (each of fixed length:
literal characters and _), and

    r = (?s) \\A s0 (?>.*?s1) ... (?>.*?s(k-1)) .* sk \\z

Each middle segment is found at its leftmost place after the previous one and that choice is
kept (the atomic group). That is exact for LIKE: segments have fixed lengths, so the leftmost
place leaves the most room for everything after it, and any match can be moved to it. The time
is then of the order of n times the pattern's length. Every character of a segment is written
as \\x{hex} (or as itself when an ASCII letter or digit), so no character of the pattern means
anything to the regex; _ is `.` (one code point, with (?s) also a line break), as in Spark's LIKE.
"""
from __future__ import annotations

from sqlglot import exp


def linear_like(where: exp.Expression) -> exp.Expression:
    """The analysis' WHERE with every `col [I]LIKE 'p' ESCAPE '\\'` written as an RLIKE (Spark);
    a new tree (the WHERE may be the LIKE itself)."""
    def rlike(node: exp.Expression) -> exp.Expression:
        like = node.this if isinstance(node, exp.Escape) else None
        if not isinstance(like, (exp.Like, exp.ILike)):
            return node
        pattern = like.expression.this
        subject = like.this.copy()
        if isinstance(like, exp.ILike):
            subject, pattern = exp.Lower(this=subject), pattern.lower()
        return exp.RegexpLike(this=subject, expression=exp.Literal.string(like_regex(pattern, node.expression.this)))
    return where.transform(rlike)


def like_regex(pattern: str, escape: str = "\\") -> str:
    """A java.util.regex pattern, found (RLIKE) exactly when the LIKE pattern matches, without
    backtracking into a % (see the module's docstring). The pattern is one the analysis accepted:
    every escape is followed by %, _ or the escape."""
    segments: list[list[str]] = [[]]
    after_percent = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern):
            segments[-1].append(_char(pattern[i + 1]))
            i, after_percent = i + 2, False
            continue
        if ch == "%":
            if not after_percent:
                segments.append([])
            after_percent = True
        else:
            segments[-1].append("." if ch == "_" else _char(ch))
            after_percent = False
        i += 1
    parts = ["".join(s) for s in segments]
    if len(parts) == 1:
        return "(?s)\\A" + parts[0] + "\\z"
    middle = "".join(f"(?>.*?{p})" for p in parts[1:-1])
    return "(?s)\\A" + parts[0] + middle + ".*" + parts[-1] + "\\z"


def _char(ch: str) -> str:
    if ch.isascii() and ch.isalnum():
        return ch
    return "\\x{%X}" % ord(ch)
