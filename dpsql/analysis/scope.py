"""Resolving a qualified column reference in a FROM scope (resolve_in), where every column a query
reads passes, and the rule checked there: a column is read only if the engine's equality on it is
the equality of its text (exact_equality).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.relation import ColRef, ColumnInfo, Instance
from dpsql.errors import QueryRejected


def resolve_in(scope: list[Instance], col: exp.Column) -> tuple[ColRef, ColumnInfo]:
    """The column a qualified reference names. Every column a query reads (in any clause, at any
    depth: keys, aggregates, WHERE, ON, semi-joins, per-unit subqueries) is resolved here, so
    exact_equality is checked here for all of them."""
    if not col.table:
        raise QueryRejected(f"the column {col.name!r}", "it could not be resolved to a table")
    for inst in scope:
        if inst.alias == col.table:
            info = inst.columns.get(col.name.lower())
            if info is None:
                raise QueryRejected(f"the column {col.name!r}", f"it is not a column of {inst.alias!r}")
            exact_equality(info)
            return (inst.alias, info.name), info
    raise QueryRejected(f"the qualifier {col.table!r}", "it is not a table or alias of this query")


def exact_equality(info: ColumnInfo, role: str = "") -> None:
    """Refuse to read a column whose equality in the engine is not the equality of its text.

    The attack. A column with a case- or accent-insensitive collation (DuckDB's COLLATE NOCASE,
    NOACCENT, NFC or an ICU locale; a PostgreSQL ICU collation created with deterministic = false;
    PostgreSQL's citext type, whose = compares lower-cased text) makes the engine hold 'CA' and
    'ca' equal. GROUP BY then merges them into one group and prints it with the spelling of the
    first row it meets, and that row may be one person's. The release looks each key's text up
    in the public domain by exact string (release._domain_lookup; partition selection releases
    the text itself): when the one person who wrote 'ca' is met first, the whole group of 'CA'
    is dropped (released as 0 plus noise) or released under that person's spelling. Either way
    the output reveals that person's row with certainty, at any epsilon: the released key is no
    longer a function of the group's value, which the privacy of a released key relies on
    (partition selection, Korolova et al. 2009 and Desfontaines et al. 2022, releases keys whose
    value many units share; a public domain releases only its own values: REFERENCES.md,
    "Bounding contributions and groups"). The same equality decides the other places dpsql lets
    the engine compare text: joins of the parts of a query (quantiles, sample-and-aggregate,
    COUNT(DISTINCT), top-k) on the keys' text, a key IN its domain, a WHERE comparison with a
    declared value (V5 narrows a domain by Python's equality), COUNT(DISTINCT col), joins and
    semi-joins, and the privacy unit itself: two people whose ids differ only in case would be
    one unit to the engine, and removing one of them would change that unit's bounded
    contribution in up to twice the groups (L0) the sensitivity counts (Wilson et al. 2020).

    The rule: one equality, the text's, everywhere. The engine reports which columns it compares
    otherwise (engines.base.TableFacts.inexact, read from its catalog with the other facts and
    checked again in each query's own transaction, on connections passed in by their owner too),
    and no private query reads one: every column reference resolves through resolve_in, which
    calls this, and the columns a query reads without naming them (its units, links and link
    keys) are checked in dpsql.analysis.bind._finish. Refusing every read, not only the
    comparisons, keeps the rule one check with no list of places to miss; what is lost is
    COUNT(col) and IS NULL of such a
    column. A DuckDB connection whose default_collation is not binary compares every text so,
    literals and dpsql's own key texts included: analyze refuses every private query on it
    (tables.check_collation)."""
    if not info.inexact:
        return
    raise QueryRejected(f"the column {info.name!r}{role}",
                        "the engine compares its values by a non-deterministic collation or a type of its own "
                        "(a case- or accent-insensitive collation, citext), so differently spelled values would "
                        "be one group shown with the spelling of whichever row the engine meets first: the "
                        "answer could reveal one person's row",
                        "ask the data owner for a view that gives the column an exact equality and declare its "
                        "domain in that spelling, e.g. lower(col) COLLATE \"C\" on PostgreSQL (lower(col::text) "
                        "for citext), lower(col) COLLATE \"binary\" on DuckDB")
