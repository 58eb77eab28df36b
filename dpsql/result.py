"""What a statement returns: a Result (rows, their types and accuracy, what was charged and what
is left) and its status line; the answer cache's encoding of a private Result; EXPLAIN DP's rows as
a Result; and the readable type name of an engine's SQL type."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from dpsql import explain
from dpsql.analysis.sqltypes import family
from dpsql.ledger import Cost, Spending
from dpsql.ledger.answer_cache import decode, encode


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How noisy one released column is.

    noise_scale: the mechanism's scale (Laplace b or Gaussian sigma) for a column that
    is one noisy aggregate; None for derived columns (AVG, arithmetic), whose
    per-value 95% half-widths are in Result.half_widths.
    ci95: the 95% confidence half-width of a plain aggregate (the same for every row); for a
    derived column the widest of its released values' half-widths, which are simulated from
    the mechanisms' noise distributions (postprocess.simulated_half_width); None if one is
    unbounded or no row was released.
    mechanism "exponential" (a quantile, MIN or MAX): noise_scale is the mechanism's temperature and
    ci95 its 95% rank error, in rows of the group (the value's rank is within ci95 of q*(n-1), up to
    one bin of the declared range), not value units; its per-value half-widths are None.
    """
    mechanism: str
    noise_scale: float | None
    ci95: float | None


class ResultKind(StrEnum):
    """What a Result holds (its value is the word the front ends and tests read)."""
    PRIVATE = "private"      # released values of a private query: noisy, charged
    PUBLIC = "public"        # rows of public tables only: exact, free
    EXPLAIN = "explain"      # EXPLAIN DP's rows
    SHOW = "show"            # a setting, a budget, a catalog listing
    SET = "set"              # SET / RESET: no rows
    EMPTY = "empty"          # an empty statement


@dataclass
class Result:
    columns: list[str]
    types: list[str]                      # per column: number, string, boolean, date, ...
    rows: list[tuple]
    kind: ResultKind
    accuracy: list[Accuracy | None] = field(default_factory=list)
    half_widths: list[tuple] = field(default_factory=list)   # per row, per column; None = exact
    cost: Cost | None = None
    spending: Spending | None = None
    tag: str = ""                         # command tag, e.g. "SELECT 3", "SET"
    db_types: list[str] = field(default_factory=list)   # per column: SQL type name (DOUBLE for noisy values)
    cached: bool = False                  # an identical earlier answer, repeated free of charge
    surcharge: float = 0.0                # epsilon added because the query selects people by identity
    truncated: int = 0                    # released groups cut by [limits] max_released_rows
    # Groups removed by partition selection: 0 when no group can have been (no GROUP BY, or every
    # key has a public domain: exactly the domain is released); None when partition selection ran,
    # whose number of suppressed groups is not released (it depends on the data: the argument is
    # in dpsql.release.present). Always None for results that are not private.
    suppressed: int | None = None
    topk: str = ""                        # SET dpsql.topk: how the released keys were chosen, for the status line

    def __post_init__(self) -> None:
        self.kind = ResultKind(self.kind)      # a plain word from older callers reads as its kind

    @property
    def status(self) -> str:
        """One line for people: what it cost and what is left."""
        if self.cost is None or self.spending is None:
            return self.tag
        s = self.spending
        if s.accountant == "zcdp":
            return self._zcdp_status()
        extra = (f" (incl. a surcharge of {self.surcharge:g} for selecting people by identity)"
                 if self.surcharge else "")
        if self.cached:
            return (f"repeated the identical earlier answer; nothing charged; "
                    f"remaining epsilon {s.epsilon_remaining:g}, delta {s.delta_remaining:g}")
        if self.truncated:
            extra += (f"; {self.truncated} more released groups were cut by the policy's "
                      f"max_released_rows (add LIMIT or narrow the query)")
        return (f"epsilon charged {self.cost.epsilon:g}" + extra
                + (f", delta {self.cost.delta:g}" if self.cost.delta else "")
                + f"; remaining epsilon {s.epsilon_remaining:g}, delta {s.delta_remaining:g}"
                + self._suppressed_note() + self.topk)

    def _suppressed_note(self) -> str:
        """The status line's word on groups partition selection removed: how many when that is a
        public fact (none), else that some may have been, never how many or which."""
        if self.kind is not ResultKind.PRIVATE or self.cached:
            return ""
        if self.suppressed is None:
            return ("; partition selection may have suppressed groups with too few people "
                    "(how many is not released: it depends on the data)")
        return ""

    def _zcdp_status(self) -> str:
        """The status under zCDP accounting: rho charged, rho left, and the epsilon spent so far."""
        s = self.spending
        left = (f"remaining rho {s.rho_remaining:.4g} of {s.rho_total:.4g} (epsilon {s.epsilon_spent:.3g} "
                f"of {s.epsilon_total:g} spent at delta {s.delta_total:g})")
        if self.cached:
            return f"repeated the identical earlier answer; nothing charged; {left}"
        c = self.cost
        alone = f"this query alone: epsilon {c.epsilon - self.surcharge:g}" + (f", delta {c.delta:g}" if c.delta else "")
        extra = "; incl. a surcharge for selecting people by identity" if self.surcharge else ""
        part = f", delta {c.zcdp_delta:g} (partition selection)" if c.zcdp_delta else ""
        cut = (f"; {self.truncated} more released groups were cut by the policy's max_released_rows "
               "(add LIMIT or narrow the query)" if self.truncated else "")
        return (f"rho charged {float(c.rho or 0):.4g}{part} ({alone}{extra}){cut}; {left}" + self._suppressed_note()
                + self.topk)


def to_cache(r: Result) -> str:
    """A private Result as the answer cache keeps it (dpsql.ledger.answer_cache's codec)."""
    acc = [None if a is None else [a.mechanism, a.noise_scale, a.ci95] for a in r.accuracy]
    return encode({"columns": r.columns, "types": r.types, "db_types": r.db_types, "rows": r.rows,
                   "accuracy": acc, "half_widths": r.half_widths, "tag": r.tag,
                   "cost": [r.cost.epsilon, r.cost.delta], "surcharge": r.surcharge})


def from_cache(payload: str, spending: Spending) -> Result:
    """A repeated answer from the cache: charged nothing, with the spending as it is now."""
    d = decode(payload)
    acc = [None if a is None else Accuracy(*a) for a in d["accuracy"]]
    return Result(d["columns"], d["types"], [tuple(r) for r in d["rows"]], ResultKind.PRIVATE, acc,
                  [tuple(h) for h in d["half_widths"]], Cost(0.0, 0.0), spending, tag=d["tag"],
                  db_types=d["db_types"], cached=True)


def type_name(sql_type: str) -> str:
    fam = family(sql_type)
    return {"int": "number", "float": "number", "decimal": "number", "text": "string", "bool": "boolean",
            "date": "date", "timestamp": "timestamp"}.get(fam, "string")


def explain_result(rows: list[tuple], form: str | None = "facts", dialect: str | None = None) -> Result:
    """EXPLAIN DP's rows in its form (dpsql.explain: facts, sql or wide)."""
    form = form or "facts"
    cols, types = explain.columns(form), explain.types(form)
    rows = explain.shaped(rows, form, dialect)
    n = len(cols)
    return Result(list(cols), list(types), rows, ResultKind.EXPLAIN, [None] * n,
                  [(None,) * n for _ in rows], tag="EXPLAIN",
                  db_types=["DOUBLE" if t == "number" else "VARCHAR" for t in types])
