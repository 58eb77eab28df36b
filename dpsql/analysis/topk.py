"""SET dpsql.topk = 'noisy_max': GROUP BY ... ORDER BY aggregate DESC LIMIT k as a top-k selection.

With the setting on, a grouped query whose ORDER BY names an aggregate and which has a LIMIT asks
"which k keys are on top". Instead of a noisy value for every group of the public domain (sorted
and cut afterwards), it is answered by report-noisy-max over the per-key aggregates the ordinary
rewrite computes in the engine (dpsql.noise.topk, where the privacy argument is written):

* the k keys are released in the mechanism's rank order (best first);
* if the query also outputs the aggregate (or arithmetic of it), its value for each of the k
  selected keys is measured afresh with the session's mechanism (Laplace or Gaussian) at the other
  half of the epsilon: one unit touches at most min(k, L0) of the selected keys, each by at most
  the per-group bound Linf, so the value noise is calibrated to L1 = min(k, L0) * Linf
  (L2 = sqrt(min(k, L0)) * Linf). The rows stay in rank order even where the fresh noisy values
  are not monotone (both are releases; the ranking is the selection's answer);
* if the query does not output the aggregate (SELECT key ... ORDER BY COUNT(*) DESC LIMIT k), the
  whole epsilon goes to the selection.

Charged: epsilon (basic accountant): epsilon_select + epsilon_values = the query's epsilon; zCDP:
epsilon_select^2 / (8k) for the selection plus the value mechanism's own rho. The selection's
score sensitivity is Linf, not L0 * Linf, which is why this is cheaper than the histogram.

Refused (QueryRejected, never answered another way while the setting is on): a key without a public
domain, ORDER BY of more than one item or of an expression of the aggregate, more than one
aggregate (or AVG, quantiles, COUNT(DISTINCT col)), OFFSET, HAVING, LIMIT 0, k larger than the
public domain, k times the domain's size above MAX_WORK, bounds = "auto", and an outer query (a BI
tool's wrapper) that orders and cuts noisy values (write the top-k in the grouped query itself). Queries without LIMIT, or without an
aggregate in ORDER BY, have nothing to select and are answered as usual.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from dpsql.analysis.measures import Count, Mechanism, NoiseSpec, Sum
from dpsql.analysis.plan import QueryPlan
from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Ref

SETTING_VALUES = ("off", "noisy_max")
SELECT_SHARE = Fraction(1, 2)     # of the query's epsilon, to the selection when values are released too
TARGET = "_topk"                  # the selection's NoiseSpec target
# k x the domain's size at most: the exact sampler's expected proposals are at most that (dpsql.noise.topk),
# each a few CSPRNG reads (about 10-40 microseconds on a loaded machine): a few seconds at worst
MAX_WORK = 100_000


@dataclass(frozen=True, slots=True)
class TopK:
    """The top-k selection of one plan.

    measure: the scored measure's name; k; desc: the top (True) or bottom (ORDER BY ... ASC) k;
    epsilon: the selection's share; sensitivity: Linf, the per-group bound of the score; monotone:
    every score moves in the same direction between neighbours; candidates: the public domain's
    size; values: whether the aggregate's value is released (measured afresh on the k keys)."""
    measure: str
    k: int
    desc: bool
    epsilon: float
    sensitivity: Fraction
    monotone: bool
    candidates: int
    values: bool
    label: str = ""

    def describe(self) -> str:
        return (f"the {'top' if self.desc else 'bottom'} {self.k} of {self.candidates} public keys by "
                f"{self.label}, in rank order; score sensitivity {float(self.sensitivity):g} per group "
                f"({'monotone: Delta/eps' if self.monotone else 'not monotone: 2 Delta/eps'} per peel, "
                f"{self.k} peel(s) of epsilon {self.epsilon / self.k:.6g})")


def _refuse(what: str, why: str, hint: str | None = None) -> QueryRejected:
    return QueryRejected(f"top-k (dpsql.topk = 'noisy_max'): {what}", why, hint)


def applies(plan: QueryPlan) -> bool:
    """Whether the query asks for a top-k: grouped, with a LIMIT, and ORDER BY reading an aggregate;
    or an outer query that orders and cuts the grouped query's rows."""
    if not plan.keys:
        return False
    if plan.limit is not None and any(e.noisy() for e, _, _ in plan.order):
        return True
    return any(w.order and w.limit is not None for w in plan.wraps) and any(o.noisy for o in plan.outputs)


def plan_topk(plan: QueryPlan, epsilon: float, delta: float, mechanism: str) -> QueryPlan:
    """The plan answered as a top-k selection (module docstring), or a refusal saying why not.
    Call only when applies(plan)."""
    if plan.limit is None or not any(e.noisy() for e, _, _ in plan.order):
        raise _refuse("ORDER BY and LIMIT in an outer query", "an outer query that orders and cuts the "
                      "grouped query's noisy rows is not a top-k selection",
                      "write ORDER BY aggregate DESC LIMIT k in the grouped query itself, or SET dpsql.topk = off")
    if plan.selection is not None:
        raise _refuse("a GROUP BY key without a public domain", "the selection chooses among the keys of a "
                      "public domain (declared values, a public table's column, or a derived domain); keys found "
                      "in the data would need partition selection first", "group by a column with a public domain")
    if plan.auto is not None:
        raise _refuse("an auto-bounded column", "its bound choice is not combined with the selection yet",
                      "declare the column's bounds")
    if plan.offset:
        raise _refuse("OFFSET", "the mechanism selects the first k keys; skipping some is not supported",
                      "use LIMIT offset + k and drop the first rows yourself")
    if plan.having is not None:
        raise _refuse("HAVING", "a filter on noisy values before the selection is not supported")
    if len(plan.order) != 1:
        raise _refuse("ORDER BY with more than one item", "the selection ranks by one aggregate only",
                      "ORDER BY the aggregate alone")
    if plan.quantiles or plan.distincts or len(plan.measures) != 1:
        raise _refuse("more than one aggregate, or AVG, a quantile or COUNT(DISTINCT col)", "the selection "
                      "scores keys by one COUNT or SUM, and the query may release only that aggregate",
                      "rank by COUNT(*) or SUM(column) and drop the other aggregates")
    expr, desc, _ = plan.order[0]
    if not isinstance(expr, Ref):
        raise _refuse("ORDER BY an expression", "the selection ranks by one COUNT or SUM itself, "
                      "not by arithmetic of aggregates", "ORDER BY the aggregate alone")
    m = plan.measures[0]
    if m.name != expr.name or type(m) not in (Count, Sum):
        raise _refuse(f"ORDER BY {m.label or 'this aggregate'}", "the selection scores keys by a COUNT or a "
                      "SUM over a bounded column only")
    k, size = plan.limit, plan.domain_size
    if k < 1:
        raise _refuse("LIMIT 0", "there is nothing to select")
    if size is None or k > size:
        raise _refuse(f"LIMIT {k}", f"k is larger than the public domain ({size} keys)",
                      "LIMIT at most the number of keys")
    if k * size > MAX_WORK:
        raise _refuse(f"LIMIT {k} over {size} keys", f"the exact sampler proposes up to k x the domain's size "
                      f"keys (more than {MAX_WORK:,} here), too slow to run per query",
                      "a smaller k or a coarser key (a bucket or CASE expression)")
    linf = m.per_group_bound(plan.rows_per_unit if plan.bounded else 1)
    if linf <= 0:
        raise _refuse(f"ORDER BY {m.label}", "the aggregate cannot vary (its bounds are 0), so there is "
                      "nothing to rank")
    monotone = isinstance(m, Count) or m.lo >= 0 or m.hi <= 0
    values = any(o.noisy for o in plan.outputs)
    eps_sel = float(Fraction(epsilon) * SELECT_SHARE) if values else epsilon
    top = TopK(m.name, k, desc, eps_sel, linf, monotone, size, values, m.label)
    noise = []
    gaussian = Mechanism(mechanism).gaussian
    if values:
        touched = min(k, plan.l0)
        noise.append(m.noise_spec(mechanism, plan.rows_per_unit if plan.bounded else 1, touched,
                                  epsilon - eps_sel, delta))
    noise.append(NoiseSpec(TARGET, Mechanism.NOISY_MAX, float(linf), float(linf), float(linf), eps_sel, 0.0))
    cost = replace(plan.cost, delta=delta if values and gaussian else 0.0)
    return replace(plan, noise=tuple(noise), cost=cost, topk=top)


def rho_parts(k: int, share: float) -> tuple[tuple[str, float, float], ...]:
    """The selection as parts for dpsql.noise.mechanisms.epsilon_for_rho: k peels of the exponential
    mechanism (rho_bound 'exponential': eps^2/8 each, exact for a bounded-range peel) at share/k."""
    return ((Mechanism.EXPONENTIAL, share / k, 0.0),) * k


__all__ = ["SETTING_VALUES", "TopK", "applies", "plan_topk", "rho_parts"]
