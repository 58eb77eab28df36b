"""'Did you mean' hints for misspelt names and keywords.

Candidates come only from the query text's own vocabulary: the SQL keyword list, the policy
(protected and public table names, declared columns) and the schema (column names of the tables
the analyst may read); never from the data. A hint therefore depends on the query text, the
policy and the schema alone, like every refusal.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

# Keywords an analyst of the subset writes (PostgreSQL's spelling), for misspelt keywords.
KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "WITH", "AS",
            "AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "ILIKE", "CASE", "WHEN", "THEN", "ELSE",
            "END", "DISTINCT", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "ON", "USING",
            "UNION", "EXCEPT", "INTERSECT", "ASC", "DESC", "NULLS", "FIRST", "LAST", "CAST", "EXTRACT",
            "DATE", "TIMESTAMP", "INTERVAL", "TRUE", "FALSE", "FILTER", "EXISTS", "COUNT", "SUM", "AVG",
            "MIN", "MAX", "COALESCE", "ROUND", "EXPLAIN", "SHOW", "SET", "RESET")


def did_you_mean(word: str, candidates: Iterable[str], *, upper: bool = False) -> str | None:
    """'did you mean "X"?' for the candidate closest to `word`, or None when none is close."""
    if not word:
        return None
    pool = {c.upper() if upper else c.lower(): c for c in candidates if c}
    key = word.upper() if upper else word.lower()
    if key in pool:
        return None
    found = difflib.get_close_matches(key, list(pool), n=1, cutoff=0.75)
    return f'did you mean "{pool[found[0]]}"?' if found else None


def keyword_hint(word: str) -> str | None:
    return did_you_mean(word, KEYWORDS, upper=True)


def table_hint(name: str, policy, others: Iterable[str] = ()) -> str | None:
    """A close name among the tables the analyst may read: the policy's protected tables (and
    their sources) and its public tables, plus `others` (the base tables, only when the policy
    opens every undeclared table)."""
    names = list(policy.tables) + [t.source.lower().rsplit(".", 1)[-1] for t in policy.tables.values() if t.source]
    return did_you_mean(name, names + sorted(policy.public.tables) + list(others))


def undeclared_table_hint(suggestion: str | None) -> str:
    """The hint for a table the policy does not declare: a close readable name first, if any."""
    ask = "ask the data owner to list it under [public] tables, or to protect it"
    return f"{suggestion} Otherwise {ask}" if suggestion else ask
