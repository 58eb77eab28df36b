"""Privacy accounting: what a query costs, and the durable per-analyst ledger that charges it.

    accounting    zCDP and composition arithmetic, and ``Cost`` (a leaf: the analysis uses it)
    params        a charge's arguments made exact (Decimal helpers) and ``ChargeParams``
    budget        running totals, the accountants' checks, ``Spending``
    series        subset series of the reconstruction defence (``SubsetCharge``, ``SubsetState``)
    schema        the SQLite schema, connections and migrations
    group_commit  one transaction and one fsync for many concurrent charges
    store         ``Ledger``: the file, its charges and its reads
    answer_cache  an identical repeat's released answer: key, codec and storage
    audit         the reconstruction defence's audit log
"""
from __future__ import annotations

from dpsql.ledger.accounting import Cost
from dpsql.ledger.audit import AuditLog
from dpsql.ledger.budget import Spending, Totals
from dpsql.ledger.params import ChargeParams
from dpsql.ledger.schema import SCHEMA_VERSION
from dpsql.ledger.series import MAX_NAMED, SubsetCharge, SubsetState
from dpsql.ledger.store import Ledger

__all__ = ["MAX_NAMED", "SCHEMA_VERSION", "AuditLog", "ChargeParams", "Cost", "Ledger", "Spending", "SubsetCharge",
           "SubsetState", "Totals"]
