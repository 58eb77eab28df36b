"""The connection's settings as a table: SET, RESET and SHOW read it.

One entry per setting (SETTINGS): its description (SHOW ALL, the documentation), how SET parses
and checks a value, its default (from the policy), how SHOW gives it, whether SHOW types it as a
number. A Settings object holds one connection's values; the Session reads them when it plans a
query, and the front ends can reset them (reset_all, as RESET ALL and DISCARD ALL do).

Nothing an analyst can SET changes the analyst, the budget or what was spent: those are shown,
never set (FIXED).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpsql.analysis import topk as topk_plan
from dpsql.errors import InvalidSetting, QueryRejected
from dpsql.policy import MECHANISMS, Policy
from dpsql.result import Result, ResultKind

FIXED = ("analyst", "budget", "spent", "ledger", "policy", "accountant")   # SET refuses: the policy's


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: name (without "dpsql."), description, parse(settings, full name, text) -> value
    (raises InvalidSetting; None: not settable), default(settings) -> value (None: not resettable),
    show(settings) -> SHOW's value, number: SHOW's column is a number even when the value is NULL.
    partner: another setting SET clears (to None) and RESET resets with this one."""
    name: str
    description: str
    show: Callable[[Settings], Any]
    parse: Callable[[Settings, str, str], Any] | None = None
    default: Callable[[Settings], Any] | None = None
    number: bool = False
    partner: str = ""


def _float_setting(name: str, value: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidSetting(f"{name} must be a number") from None
    if not math.isfinite(v):
        raise InvalidSetting(f"{name} must be finite")
    return v


def _bool_setting(name: str, value: str) -> bool:
    """A boolean setting as PostgreSQL spells one: on/off, true/false, yes/no, 1/0."""
    v = str(value).strip().strip("'\"").lower()
    if v in ("on", "true", "yes", "1", "t", "y"):
        return True
    if v in ("off", "false", "no", "0", "f", "n"):
        return False
    raise InvalidSetting(f"{name} must be on or off")


def _epsilon(s: Settings, name: str, value: str) -> float:
    eps = _float_setting(name, value)
    if not eps > 0:
        raise InvalidSetting("dpsql.epsilon must be positive")
    floor = s.policy.defaults.min_epsilon
    if eps < floor:
        raise InvalidSetting(f"dpsql.epsilon {eps:g} is below the policy's minimum {floor:g} per query: "
                             "every answer also reveals a little that is not noised (such as its run "
                             "time), so the number of queries one budget buys is bounded")
    total = s.budget.epsilon
    if eps > total:
        raise InvalidSetting(f"dpsql.epsilon {eps:g} exceeds the lifetime budget {total:g}")
    spending = s.spending()
    left = spending.epsilon_remaining
    if spending.accountant == "basic" and eps > left:   # under zCDP the ledger checks the query's rho
        raise InvalidSetting(f"dpsql.epsilon {eps:g} exceeds the remaining budget {left:g}")
    return eps


def _rho(s: Settings, name: str, value: str) -> float:
    """SET dpsql.rho: each following query's noise is calibrated to cost this much rho (zCDP only)."""
    rho = _float_setting(name, value)
    if not rho > 0:
        raise InvalidSetting("dpsql.rho must be positive")
    sp = s.spending()
    if sp.accountant != "zcdp":
        raise InvalidSetting("dpsql.rho needs zCDP accounting; this budget is kept under basic composition, "
                             "which charges epsilon: SET dpsql.epsilon")
    floor = s.policy.defaults.rho_floor
    if rho < floor:
        raise InvalidSetting(f"dpsql.rho {rho:g} is below the policy's minimum {floor:g} per query: every answer "
                             "also reveals a little that is not noised (such as its run time), so the number of "
                             "queries one budget buys is bounded")
    if rho > sp.rho_total:
        raise InvalidSetting(f"dpsql.rho {rho:g} exceeds what the lifetime budget allows ({sp.rho_total:.6g})")
    if rho > sp.rho_remaining:
        raise InvalidSetting(f"dpsql.rho {rho:g} exceeds the remaining budget (rho {sp.rho_remaining:.6g})")
    return rho


def _delta(s: Settings, name: str, value: str) -> float:
    delta = _float_setting(name, value)
    if not 0 <= delta < 1:
        raise InvalidSetting("dpsql.delta must be in [0, 1)")
    if delta > s.budget.delta:
        raise InvalidSetting(f"dpsql.delta {delta:g} exceeds the lifetime budget {s.budget.delta:g}")
    if delta == 0 and s.mechanism != "laplace":
        raise InvalidSetting("the Gaussian mechanism needs dpsql.delta > 0")
    return delta


def _mechanism(s: Settings, name: str, value: str) -> str:
    mech = value.strip().lower()
    if mech not in MECHANISMS:
        raise InvalidSetting(f"dpsql.mechanism must be one of {', '.join(MECHANISMS)}")
    if mech != "laplace" and s.delta <= 0:
        raise InvalidSetting("the Gaussian mechanism needs dpsql.delta > 0; SET dpsql.delta first")
    return mech


def _plan_queries(s: Settings, name: str, value: str) -> int:
    try:
        k = int(value.strip())
    except (TypeError, ValueError):
        raise InvalidSetting("dpsql.plan_queries must be a whole number") from None
    if not 0 <= k <= 10 ** 9:
        raise InvalidSetting("dpsql.plan_queries must be between 0 (off) and 1000000000")
    return k


def _topk(s: Settings, name: str, value: str) -> str:
    v = str(value).strip().strip("'\"").lower()
    if v not in topk_plan.SETTING_VALUES:
        raise InvalidSetting("dpsql.topk must be 'off' or 'noisy_max'")
    return v


def _default_rho(s: Settings) -> float | None:
    """The policy's per-query rho ([defaults] rho), for analysts kept under zCDP accounting."""
    d = s.policy.defaults
    return d.rho if d.rho is not None and s.spending().accountant == "zcdp" else None


def _on_off(key: str) -> Callable[[Settings], str]:
    return lambda s: "on" if getattr(s, key) else "off"


SETTINGS: dict[str, Setting] = {e.name: e for e in (      # in SHOW ALL's order
    Setting("epsilon", "epsilon each following query is charged (NULL while dpsql.rho calibrates them)",
            lambda s: None if s.rho is not None else s.epsilon,    # rho calibrates the queries now, not epsilon
            _epsilon, lambda s: s.policy.defaults.epsilon, number=True, partner="rho"),
    Setting("rho", "zCDP cost each following query is calibrated to (zCDP accounting only)",
            lambda s: s.rho, _rho, _default_rho, number=True),
    Setting("delta", "delta for the Gaussian mechanism and partition selection",
            lambda s: s.delta, _delta, lambda s: s.policy.defaults.delta),
    Setting("mechanism", "noise mechanism: laplace, gaussian (analytic) or gaussian_classic",
            lambda s: s.mechanism, _mechanism, lambda s: s.policy.defaults.mechanism),
    Setting("plan_queries", "EXPLAIN DP also plans a series of this many such queries (0: off)",
            lambda s: s.plan_queries, _plan_queries, lambda s: 0),
    Setting("intervals", "on: each noisy column c is followed by c_low and c_high, its 95% interval",
            _on_off("intervals"), lambda s, name, value: _bool_setting(name, value), lambda s: False),
    Setting("round", "on: noisy counts as whole numbers, negative ones clamped to 0 (post-processing)",
            _on_off("round"), lambda s, name, value: _bool_setting(name, value), lambda s: False),
    Setting("topk", "noisy_max: GROUP BY ... ORDER BY COUNT/SUM LIMIT k releases the top k keys chosen by "
                    "report-noisy-max (scores at the per-group sensitivity), off: every group's noisy value",
            lambda s: s.topk, _topk, lambda s: "off"),
    Setting("accountant", "how the budget is kept: zcdp or basic (fixed by the policy)",
            lambda s: s.spending().accountant),
    Setting("analyst", "whose budget is charged (fixed at login)", lambda s: s.analyst),
)}


class Settings:
    """One connection's settings (the values SETTINGS describes), with SET, RESET and SHOW.

    policy: the defaults and floors; budget: the analyst's lifetime budget (Policy.budget_for);
    ledger: where spending() reads what is left now, for the checks and SHOW."""

    def __init__(self, policy: Policy, analyst: str, budget, ledger):
        self.policy, self.analyst, self.budget, self._ledger = policy, analyst, budget, ledger
        self.epsilon: float = 0.0
        self.delta: float = 0.0
        self.mechanism: str = "laplace"
        self.rho: float | None = None   # SET dpsql.rho: calibrate each query to this zCDP cost
        self.plan_queries = 0           # SET dpsql.plan_queries: EXPLAIN DP compares k such queries
        self.intervals = False          # SET dpsql.intervals: <col>_low, <col>_high after noisy columns
        self.round = False              # SET dpsql.round: counts as whole numbers, at least 0
        self.topk = "off"               # SET dpsql.topk: 'noisy_max' answers ORDER BY agg LIMIT k by selection
        self.reset_all()

    def spending(self):
        """The analyst's spending now (the ledger's Spending)."""
        b = self.budget
        return self._ledger.spending(self.analyst, epsilon_total=b.epsilon, delta_total=b.delta,
                                     accountant=b.accountant)

    def reset_all(self) -> None:
        """Every setting back to its default (RESET ALL; the proxy's DISCARD ALL)."""
        for e in SETTINGS.values():
            if e.default is not None:
                setattr(self, e.name, e.default(self))

    def set(self, name: str, value: str) -> Result:
        if not name.startswith("dpsql."):
            raise QueryRejected(f"SET {name}", "only dpsql.epsilon, dpsql.rho, dpsql.delta, dpsql.mechanism and "
                                "dpsql.plan_queries can be set", "engine settings are fixed by the data owner")
        key = name[len("dpsql."):]
        e = SETTINGS.get(key)
        if e is not None and e.parse is not None:
            setattr(self, key, e.parse(self, name, value))
            if e.partner:
                setattr(self, e.partner, None)
        elif key in FIXED:
            raise QueryRejected(f"SET {name}", "the analyst, the budget, its accountant and the spending are fixed "
                                "by the policy")
        else:
            raise InvalidSetting(f"unknown setting {name}; settable: "
                                 + ", ".join(f"dpsql.{e.name}" for e in SETTINGS.values() if e.parse is not None))
        return Result([], [], [], ResultKind.SET, tag="SET")

    def reset(self, name: str) -> Result:
        e = SETTINGS.get(name[len("dpsql."):]) if name.startswith("dpsql.") else None
        if name == "all":
            self.reset_all()
        elif e is not None and e.default is not None:
            setattr(self, e.name, e.default(self))
            if e.partner:
                setattr(self, e.partner, SETTINGS[e.partner].default(self))
        else:
            raise QueryRejected(f"RESET {name}", "only dpsql settings can be reset")
        return Result([], [], [], ResultKind.SET, tag="RESET")

    def all(self) -> list[tuple[str, str | None, str]]:
        """Every dpsql setting as (name, value as text, description), for SHOW ALL."""
        out = []
        for e in SETTINGS.values():
            v = e.show(self)
            out.append((f"dpsql.{e.name}", None if v is None else (f"{v:g}" if isinstance(v, float) else str(v)),
                        e.description))
        return out

    def show(self, name: str) -> Result:
        if name == "all":
            rows = self.all()
            return Result(["name", "setting", "description"], ["string"] * 3, rows, ResultKind.SHOW, [None] * 3,
                          [(None,) * 3 for _ in rows], tag="SHOW", db_types=["VARCHAR"] * 3)
        if name == "dpsql.budget":
            return self._budget()
        e = SETTINGS.get(name[len("dpsql."):]) if name.startswith("dpsql.") else None
        if e is None:
            raise QueryRejected(f"SHOW {name}", "dpsql shows dpsql.budget, dpsql.epsilon, dpsql.rho, dpsql.delta, "
                                "dpsql.mechanism, dpsql.plan_queries, dpsql.intervals, dpsql.round, "
                                "dpsql.topk, dpsql.accountant and dpsql.analyst")
        v = e.show(self)
        number = isinstance(v, (int, float)) or e.number
        return Result([e.name], ["number" if number else "string"], [(v,)], ResultKind.SHOW, [None], [(None,)],
                      tag="SHOW", db_types=["DOUBLE" if number else "VARCHAR"])

    def _budget(self) -> Result:
        """SHOW dpsql.budget: what the analyst spent and has left."""
        s = self.spending()
        cols = ["analyst", "epsilon_spent", "epsilon_remaining", "delta_spent", "delta_remaining",
                "rho_spent", "rho_remaining", "accountant"]
        row = (self.analyst, s.epsilon_spent, s.epsilon_remaining, s.delta_spent, s.delta_remaining,
               s.rho_spent, s.rho_remaining, s.accountant)
        n = len(cols)
        return Result(cols, ["string"] + ["number"] * 6 + ["string"], [row], ResultKind.SHOW, [None] * n, [(None,) * n],
                      tag="SHOW", db_types=["VARCHAR"] + ["DOUBLE"] * 6 + ["VARCHAR"])
