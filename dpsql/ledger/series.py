"""Subset series, the ledger's part of the reconstruction defence (dpsql.analysis.reconstruction).

Per analyst and population, ``subset_series`` counts the subset-selection queries answered and
remembers which identity values they named; a query that would pass its series' cap is refused.

Why the subset cap cannot be overrun: the series row is read, checked against the cap and
updated inside the same savepoint as the charge, in the same batch transaction (BEGIN IMMEDIATE,
dpsql.ledger.group_commit), so neither two connections nor two charges of one batch can both take
the last allowed query.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from dpsql.errors import OperationalError, QueryRejected

__all__ = ["MAX_NAMED", "SubsetCharge", "SubsetState", "all_series", "next_state", "state", "write"]

MAX_NAMED = 4096        # identity values remembered per series; beyond, the count saturates


@dataclass(frozen=True, slots=True)
class SubsetCharge:
    """A subset-selection query's part of a charge: which series it joins and the cap rule.

    cap: a fixed cap (the policy's max_subset_queries), or a function of the number of distinct
    identity values the series has named (None when some query named none) giving the cap.
    """
    population: str
    named: frozenset[str]
    cap: int | Callable[[int | None], int]


@dataclass(frozen=True, slots=True)
class SubsetState:
    """A series after (or, for EXPLAIN, before) a query: answered so far, the cap, values named."""
    population: str
    answered: int
    cap: int
    named: int | None          # distinct identity values named, None if some query named none


def state(db: sqlite3.Connection, path: str, analyst: str, subset: SubsetCharge) -> SubsetState:
    """The series this subset query would join, as it would be were the query answered
    (for EXPLAIN DP and for messages): answered counts the series so far, not this query."""
    answered, named, unnamed = _read(db, path, analyst, subset.population)
    named = named | subset.named
    n = None if unnamed or not subset.named else len(named)
    return SubsetState(subset.population, answered, _cap(subset, n), n)


def all_series(db: sqlite3.Connection, analyst: str) -> list[SubsetState]:
    """Every population the analyst has probed with subset queries (admin view), by last use."""
    rows = db.execute("SELECT population, answered, named, unnamed FROM subset_series"
                      " WHERE analyst = ? ORDER BY last_at", (analyst,)).fetchall()
    return [SubsetState(p, a, -1, None if u else len(json.loads(n))) for p, a, n, u in rows]


def next_state(db: sqlite3.Connection, path: str, analyst: str, subset: SubsetCharge) -> tuple[int, set[str], int]:
    """The series after this query, or QueryRejected if its cap is reached."""
    answered, named, unnamed = _read(db, path, analyst, subset.population)
    if len(named) < MAX_NAMED:
        named |= set(sorted(subset.named)[:MAX_NAMED - len(named)])
    if not subset.named:
        unnamed += 1
    n = None if unnamed else len(named)
    cap = _cap(subset, n)
    if answered >= cap:
        raise QueryRejected(
            f"another query selecting people by identity over the same population ({subset.population})",
            f"{answered} such queries were answered and the policy allows {cap} "
            "([reconstruction] max_subset_queries): a series of answers about chosen subsets of people "
            "can rebuild each person's data (Dinur-Nissim)",
            "ask about groups defined by what people are (age, state, ...), not by who they are")
    return answered + 1, named, unnamed


def write(db: sqlite3.Connection, analyst: str, population: str, series: tuple[int, set[str], int], at: str) -> None:
    """Store the series next_state returned, in the charge's savepoint."""
    answered, named, unnamed = series
    db.execute(
        "INSERT INTO subset_series (analyst, population, answered, named, unnamed, first_at, last_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (analyst, population) DO UPDATE SET"
        " answered = excluded.answered, named = excluded.named, unnamed = excluded.unnamed,"
        " last_at = excluded.last_at",
        (analyst, population, answered, json.dumps(sorted(named)), unnamed, at, at))


def _read(db: sqlite3.Connection, path: str, analyst: str, population: str) -> tuple[int, set[str], int]:
    row = db.execute("SELECT answered, named, unnamed FROM subset_series WHERE analyst = ? AND population = ?",
                     (analyst, population)).fetchone()
    if row is None:
        return 0, set(), 0
    try:
        named = json.loads(row[1])
    except ValueError:
        named = None
    if not isinstance(named, list):
        raise OperationalError(f"privacy ledger {path}: malformed subset series in the ledger")
    return int(row[0]), set(named), int(row[2])


def _cap(subset: SubsetCharge, named: int | None) -> int:
    cap = subset.cap(named) if callable(subset.cap) else subset.cap
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError("a subset cap must be a whole number >= 0")
    return cap
