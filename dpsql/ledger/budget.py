"""An analyst's spending: the exact running totals, the accountants' checks and the Spending view.

Accountants (dpsql.ledger.accounting):
    Every charge records both currencies: (epsilon, delta) and (rho, delta part). Which one is
    checked against the policy's (epsilon, delta) budget is the analyst's accountant: "zcdp" (the
    composed rho, with the delta part, must convert to within the budget: accounting.fits) or
    "basic" (epsilons and deltas add up to within it, the old rule). The accountant is fixed at the
    analyst's first charge (spent.accountant) and never changes afterwards, whatever a later policy
    says: a privacy filter is valid only for a stopping rule fixed in advance, and switching rules
    mid-way (or taking whichever is more favourable) is covered by neither composition theorem.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from decimal import Decimal

from dpsql.errors import BudgetExhausted, OperationalError
from dpsql.ledger import accounting
from dpsql.ledger.params import EXACT, ZERO, show, show_rho, stored

__all__ = ["Spending", "Totals", "check", "read_spent", "spending_of"]


@dataclass(frozen=True, slots=True)
class Spending:
    """An analyst's spending against the totals the policy grants.

    Under "basic": epsilon_spent and delta_spent are the sums of the charges'. Under "zcdp":
    epsilon_spent is the epsilon the composed total implies at the budget's delta (an upper
    bound), delta_spent the delta part (partition selection) spent, rho_total the rho the whole
    budget allows at its delta and rho_remaining what is left of it (lower bounds). rho_spent is
    the sum of the charges' rho under both (the ledger records it always)."""
    analyst: str
    epsilon_spent: float
    epsilon_remaining: float
    delta_spent: float
    delta_remaining: float
    epsilon_total: float
    delta_total: float
    accountant: str = "basic"
    rho_spent: float = 0.0
    rho_remaining: float | None = None       # None under basic
    rho_total: float | None = None           # None under basic


@dataclass(frozen=True, slots=True)
class Totals:
    """An analyst's exact running totals, and the accountant fixed at their first charge."""
    epsilon: Decimal
    delta: Decimal
    rho: Decimal
    zcdp_delta: Decimal
    accountant: str | None


def spending_of(analyst: str, t: Totals, epsilon_total: float, delta_total: float, eps_total: Decimal,
                dlt_total: Decimal, accountant: str) -> Spending:
    """Spending from an analyst's running totals t and the budget's totals (as given, and exact)."""
    acc = t.accountant or accountant
    if acc == "basic":
        return Spending(
            analyst=analyst,
            epsilon_spent=float(t.epsilon),
            epsilon_remaining=float(max(EXACT.subtract(eps_total, t.epsilon), ZERO)),
            delta_spent=float(t.delta),
            delta_remaining=float(max(EXACT.subtract(dlt_total, t.delta), ZERO)),
            epsilon_total=float(epsilon_total),
            delta_total=float(delta_total),
            accountant="basic",
            rho_spent=float(t.rho),
        )
    eps_spent = accounting.epsilon_spent(t.rho, t.zcdp_delta, dlt_total)
    left_delta = max(EXACT.subtract(dlt_total, t.zcdp_delta), ZERO)
    capacity = accounting.rho_capacity(eps_total, left_delta)
    return Spending(
        analyst=analyst,
        epsilon_spent=eps_spent,
        epsilon_remaining=max(float(eps_total) - eps_spent, 0.0),
        delta_spent=float(t.zcdp_delta),
        delta_remaining=float(left_delta),
        epsilon_total=float(epsilon_total),
        delta_total=float(delta_total),
        accountant="zcdp",
        rho_spent=float(t.rho),
        rho_remaining=float(max(capacity - t.rho, ZERO)),
        rho_total=float(accounting.rho_capacity(eps_total, dlt_total)),
    )


def _check_basic(t: Totals, eps: Decimal, dlt: Decimal, eps_total: Decimal, dlt_total: Decimal) -> None:
    """Basic composition: the epsilons and the deltas each add up to within the totals (exact)."""
    for what, spent, need, total in (("epsilon", t.epsilon, eps, eps_total), ("delta", t.delta, dlt, dlt_total)):
        if EXACT.add(spent, need) > total:
            left = max(EXACT.subtract(total, spent), ZERO)
            raise BudgetExhausted(f"privacy budget exhausted: {what} remaining {show(left)}, "
                                  f"this query needs {show(need)}",
                                  hint="the budget is set by the policy; ask its administrator",
                                  resource=what, remaining=float(left), needed=float(need))


def _check_zcdp(t: Totals, rho: Decimal, part: Decimal, eps_total: Decimal, dlt_total: Decimal) -> None:
    """zCDP: the composed (rho, delta part) must convert to within the totals (accounting.fits)."""
    new_part = EXACT.add(t.zcdp_delta, part)
    if new_part > dlt_total:
        left = max(EXACT.subtract(dlt_total, t.zcdp_delta), ZERO)
        raise BudgetExhausted(f"privacy budget exhausted: delta remaining {show(left)}, "
                              f"this query needs {show(part)} (partition selection)",
                              hint="the budget is set by the policy; ask its administrator",
                              resource="delta", remaining=float(left), needed=float(part))
    if not accounting.fits(EXACT.add(t.rho, rho), new_part, eps_total, dlt_total):
        room = accounting.rho_capacity(eps_total, EXACT.subtract(dlt_total, new_part))
        left = max(EXACT.subtract(room, t.rho), ZERO) if room.is_finite() else room
        raise BudgetExhausted(f"privacy budget exhausted: rho remaining {show_rho(left)}, "
                              f"this query needs {show_rho(rho)} (zCDP accounting of epsilon "
                              f"{show(eps_total)}, delta {show(dlt_total)})",
                              hint="the budget is set by the policy; ask its administrator",
                              resource="rho", remaining=float(left) if left.is_finite() else None,
                              needed=float(rho))


def check(t: Totals, c_eps: Decimal, c_dlt: Decimal, c_rho: Decimal, c_part: Decimal, accountant: str,
          eps_total: Decimal, dlt_total: Decimal) -> None:
    """Raise BudgetExhausted unless one charge fits the totals t under the accountant."""
    if accountant == "basic":
        _check_basic(t, c_eps, c_dlt, eps_total, dlt_total)
    else:
        _check_zcdp(t, c_rho, c_part, eps_total, dlt_total)


def read_spent(db: sqlite3.Connection, path: str, analyst: str) -> Totals:
    """The analyst's running totals as db's transaction sees them (zeros before the first charge)."""
    row = db.execute("SELECT epsilon, delta, rho, zcdp_delta, accountant FROM spent WHERE analyst = ?",
                     (analyst,)).fetchone()
    if row is None:
        return Totals(ZERO, ZERO, ZERO, ZERO, None)
    if row[4] not in accounting.ACCOUNTANTS:
        raise OperationalError(f"privacy ledger {path}: malformed accountant in the ledger")
    return Totals(stored(path, row[0]), stored(path, row[1]), stored(path, row[2]), stored(path, row[3]), row[4])
