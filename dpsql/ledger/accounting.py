"""Privacy accounting: what one query costs in zero-concentrated DP, and what a total converts to.

The ledger's currency is approximate zCDP (Bun & Steinke, "Concentrated Differential Privacy:
Simplifications, Extensions, and Lower Bounds", TCC 2016; BS16 below). Every charge records

    rho         the zCDP part: D_alpha(M(x) || M(x')) <= rho * alpha for every alpha > 1, and
    zcdp_delta  the part outside zCDP: partition selection's delta,

besides the query's own (epsilon, delta) and its mechanisms' parameters. The policy's lifetime
budget stays an (epsilon, delta) pair; under the "zcdp" accountant a charge is allowed only if
the composed total still converts to within it (``fits``), under "basic" if the epsilons and the
deltas still add up to within it (``basic_fits``, the old rule).

Claims (each with its source; tests in tests/ledger/test_accounting.py)
------------------------------------------------------------------------
1. Gaussian. Discrete Gaussian noise N_Z(0, s^2) added to integers whose change between neighbours
   has L2 norm at most D is (D^2 / (2 s^2))-zCDP (Canonne, Kamath & Steinke, "The Discrete
   Gaussian for Differential Privacy", NeurIPS 2020 (CKS20), Thm 4; Thm 14 for independent noise
   on several values). dpsql's Gaussian mechanisms add N_Z(0, sigma_g^2) in grid units to values
   whose change is at most Delta_g grid units (dpsql.noise.mechanisms), so
   rho = Delta_g^2 / (2 sigma_g^2), an exact rational computed from the integers actually used.
2. Laplace. An epsilon-DP mechanism is (epsilon^2 / 2)-zCDP (BS16, Prop. 1.4). dpsql's discrete
   Laplace on the grid, and the Laplace on distinct-unit counts of partition selection, are
   epsilon-DP, so rho = epsilon^2 / 2 (exact for the float epsilon). Tighter values exist for the
   one-dimensional continuous Laplace (epsilon + e^-epsilon - 1: Harrison & Manurangsi 2025) but
   not, as derived here, for a release over several groups on the grid; not used.
3. Partition selection is delta-approximately (epsilon^2/2)-zCDP in the mixture sense: for
   neighbours D and D' = D + one unit u, M(D') = (1 - p) Q' + p Q'' where Q' is M(D') given that
   none of the keys held by u alone is released and p <= delta (the threshold's guarantee); the
   keys both hold get independent Laplace noise on counts that change by at most 1 on at most L0
   keys (epsilon-DP) and the values of released keys are post-processing of independent noise, so
   D_alpha(M(D) || Q') and D_alpha(Q' || M(D)) are at most (rho_values + epsilon^2/2) alpha.
   The same holds for any (epsilon, delta)-DP charge whose parameters are unknown (a migrated
   row that cannot be read): it is a post-processing of the (epsilon, delta) randomized response
   (Kairouz, Oh & Viswanath, ICML 2015, Thm 2.1 and its Blackwell argument), which is that mixture.
4. Composition. rho-zCDP composes additively, also adaptively (BS16, Lemma 2.3); for mixtures
   with weights (1 - delta_i) the deltas add (the product of the conditional parts carries weight
   at least 1 - sum delta_i). Parameters chosen adaptively by the analyst and a fixed budget
   checked before each release form a privacy filter (Rogers, Roth, Ullman & Vadhan, NeurIPS 2016
   for basic composition; Feldman & Zrnic, NeurIPS 2021 and Whitehouse, Ramdas, Rogers & Wu, ICML
   2023 for Renyi/zCDP filters). A filter must be fixed in advance: hence the accountant is fixed
   per analyst when spending starts and never switched (dpsql.ledger.budget).
5. Conversion. rho-zCDP implies (eps, delta')-DP for every alpha > 1 with
        eps = alpha rho + (ln(1/delta') - ln alpha) / (alpha - 1) + ln(1 - 1/alpha)
   (CKS20, Prop. 12 / Cor. 13; the infimum over alpha is the tight conversion of a rho-zCDP
   guarantee). With a delta part delta_0 (claim 3): P(S) <= (1 - delta_0) P'(S) + delta_0 <=
   e^eps Q(S) + delta' + delta_0, since (1 - delta_0) Q'(S) <= Q(S). So a total (rho, delta_0) is
   (eps(rho, delta_B - delta_0), delta_B)-DP: the budget's delta minus the delta part is what the
   conversion may use.
6. Advanced composition, for comparison only (EXPLAIN DP): k mechanisms each (eps, delta)-DP are
   (sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')-DP (Dwork, Rothblum &
   Vadhan, FOCS 2010; Dwork & Roth 2014, Thm 3.20), for parameters fixed in advance.

Why our own conversion, not a library's: dp-accounting and OpenDP implement the same CKS20
formula (tests cross-check against dp-accounting); neither evaluates it with directed rounding
on exact decimals, which the ledger needs (below), and dpsql needs no new run-time dependency.

Conservative arithmetic (the budget check never rounds in the analyst's favour)
--------------------------------------------------------------------------------
* A query's rho is an exact rational; it is stored rounded *up* to RHO_DIGITS significant digits
  (``decimal_up``), so the recorded rho is never below the true one. Sums in the ledger are exact
  (Decimal, Inexact trapped). Deltas are exact decimals of the floats used.
* The conversion is evaluated at one alpha (found in floating point, near the optimum; any
  alpha > 1 gives a valid bound, so an imprecise alpha can only make the result larger) in
  40-digit Decimal arithmetic with every operation rounded towards the safe side: products and
  quotients with ROUND_CEILING, and each logarithm (Decimal.ln is correctly rounded) moved one
  unit in the last place up or down. The result is an upper bound on eps(alpha), hence on the
  tight eps. ``fits`` compares that upper bound with the budget's epsilon, exactly; first, it
  accepts any rho up to ``rho_capacity`` (below) without a logarithm, which is sound for the same
  reason (the capacity's own alpha bounds every smaller rho).
* The epsilon shown after a charge (``epsilon_spent``) is the same bound at a grid alpha whose
  logarithms are kept: still an upper bound, at most a relative 1e-6 above ``epsilon_upper``.
* Counts, capacities and remaining rho shown to people are lower bounds (``rho_capacity`` rounds
  the other way), checked again with ``fits`` where a count is reported.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import (
    ROUND_CEILING,
    ROUND_FLOOR,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
)
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "ACCOUNTANTS",
    "Cost",
    "RHO_DIGITS",
    "Plan",
    "advanced_count",
    "advanced_epsilon",
    "basic_count",
    "basic_fits",
    "decimal_up",
    "epsilon_spent",
    "epsilon_upper",
    "fits",
    "gaussian_rho",
    "laplace_rho",
    "plan_series",
    "rho_capacity",
    "rho_of_params",
    "zcdp_count",
]

ACCOUNTANTS = ("zcdp", "basic")
RHO_DIGITS = 30                     # significant digits of a stored rho (rounded up)

_UP = Context(prec=RHO_DIGITS, rounding=ROUND_CEILING)
_PREC = 40
_CEIL = Context(prec=_PREC, rounding=ROUND_CEILING)
_FLOOR = Context(prec=_PREC, rounding=ROUND_FLOOR)
_NEAR = Context(prec=_PREC)
_EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation])
_ZERO = Decimal(0)
_ONE = Decimal(1)
_INF = Decimal("Infinity")


# -- a query's cost ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Cost:
    """An (epsilon, delta) privacy cost, and, once the mechanisms are known, its zero-concentrated
    DP cost: rho (exact) and the delta outside zCDP (partition selection).

    Adding two costs is sequential composition: running several mechanisms on the same data costs
    the sum of their (epsilon, delta), and of their rho and delta parts (claim 4). Parallel
    composition (mechanisms on disjoint sets of privacy units cost the maximum: Dwork & Roth 2014,
    Thm 3.14 and McSherry 2009) is applied only across GROUP BY partitions after contribution
    bounding has limited each unit to `max_groups_per_unit` groups, where the per-group
    sensitivity is multiplied by that limit instead (Wilson et al. 2020)."""
    epsilon: float
    delta: float = 0.0
    rho: Fraction | None = None          # None: not (yet) computed
    zcdp_delta: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        rho = None if self.rho is None or other.rho is None else self.rho + other.rho
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, rho,
                    self.zcdp_delta + other.zcdp_delta)


def decimal_up(x: Fraction | int | Decimal) -> Decimal:
    """The smallest decimal of RHO_DIGITS significant digits that is >= x (x >= 0)."""
    x = Fraction(x)
    if x < 0:
        raise ValueError("rho must be >= 0")
    if x == 0:
        return _ZERO
    return _UP.divide(Decimal(x.numerator), Decimal(x.denominator))   # ints convert exactly


def laplace_rho(epsilon: float) -> Fraction:
    """rho of an epsilon-DP release: epsilon^2 / 2 (BS16 Prop. 1.4), exact for the float epsilon."""
    e = Fraction(epsilon)
    return e * e / 2


def gaussian_rho(grid_sensitivity: int, grid_sigma: int) -> Fraction:
    """rho of discrete Gaussian noise sigma_g on changes of at most Delta_g grid units (CKS20 Thm 4, 14)."""
    if grid_sensitivity <= 0 or grid_sigma <= 0:
        raise ValueError("grid sensitivity and sigma must be positive")
    return Fraction(grid_sensitivity * grid_sensitivity, 2 * grid_sigma * grid_sigma)


def rho_of_params(params: object, epsilon: Decimal, delta: Decimal) -> tuple[Fraction, Decimal]:
    """(rho, delta part) of a charge recorded before zCDP accounting, from its stored parameters.

    The parameters a Session stored ({"values": [...], "partition_selection": {...},
    "subset_selection": {"surcharge": s}}) give the mechanisms actually used: Gaussian values
    from their grid sensitivity and sigma (sigma is the float of an integer number of grid units;
    the integer is bounded below so that rho is bounded above), Laplace values and selection from
    their epsilon, the surcharge as a factor (1 + s), the selection's delta as the delta part.
    Anything else, or anything malformed, is charged as a generic (epsilon, delta)-DP release:
    rho = epsilon^2 / 2 and delta part = delta (claim 3). Either way an upper bound.
    """
    generic = (Fraction(epsilon) ** 2 / 2, Decimal(delta))
    try:
        return _from_params(params)
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return generic


def _from_params(params: object) -> tuple[Fraction, Decimal]:
    if not isinstance(params, Mapping) or not isinstance(params.get("values"), list) or not params["values"]:
        raise ValueError("not a Session's parameters")
    rho = Fraction(0)
    for v in params["values"]:
        rho += _part_rho(v)
    extra = _ZERO
    sel = params.get("partition_selection")
    if sel is not None:
        if sel.get("mechanism") != "laplace":
            raise ValueError("unknown selection")
        rho += laplace_rho(_positive(sel["epsilon"]))
        extra = Decimal(float.__repr__(_nonnegative(sel["delta"])))   # as the ledger reads floats
    sub = params.get("subset_selection")
    if sub is not None:
        rho *= 1 + Fraction(_nonnegative(sub["surcharge"]))
    return rho, extra


def _part_rho(v: Mapping) -> Fraction:
    kind = v["mechanism"]
    if kind == "laplace":
        return laplace_rho(_positive(v["epsilon"]))
    if kind in ("gaussian", "gaussian_classic"):
        dg = v["grid_sensitivity"]
        if isinstance(dg, bool) or not isinstance(dg, int) or dg <= 0:
            raise ValueError("grid sensitivity")
        if isinstance(v.get("grid_sigma"), int) and not isinstance(v["grid_sigma"], bool):
            sg = v["grid_sigma"]
        else:
            k = v["grid_exponent"]
            if isinstance(k, bool) or not isinstance(k, int):
                raise ValueError("grid exponent")
            scaled = Fraction(_positive(v["sigma"])) / (Fraction(2) ** k)
            # the float is within 2^-53 (relative) of the integer it was converted from
            sg = math.ceil(scaled * (1 - Fraction(1, 2 ** 52)))
        return gaussian_rho(dg, sg)
    raise ValueError("unknown mechanism")


def _positive(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError("not a positive number")
    return float(x)


def _nonnegative(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise ValueError("not a number >= 0")
    return float(x)


# -- rho -> (epsilon, delta) --------------------------------------------------------------------------

def _as_decimal(x: object) -> Decimal:
    if isinstance(x, Decimal):
        return x
    if isinstance(x, Fraction):
        return decimal_up(x)
    if isinstance(x, float):
        return Decimal(float.__repr__(x))
    return Decimal(x)


def _best_alpha(rho: float, log_inv_delta: float) -> float:
    """alpha near the minimiser of CKS20's eps(alpha): the root of f'(alpha) = rho - (L - ln alpha)/(alpha-1)^2.

    With s = alpha - 1, g(s) = s^2 rho - L + ln(1 + s) is increasing, negative near 0 and positive
    at sqrt(L / rho); bisection in log s. Only tightness depends on this, never soundness."""
    rho = max(rho, 1e-300)
    top = math.sqrt(log_inv_delta / rho)                  # s^2 rho <= L at the root
    floor_sq = log_inv_delta - math.log1p(top)            # and s^2 rho >= L - ln(1 + top)
    bottom = math.sqrt(floor_sq / rho) if floor_sq > 0 else 1e-12
    lo, hi = math.log(max(min(bottom, top), 1e-12)), math.log(top + 1.0)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        s = math.exp(mid)
        if s * s * rho - log_inv_delta + math.log1p(s) > 0:
            hi = mid
        else:
            lo = mid
    return 1.0 + math.exp(0.5 * (lo + hi))


def _ln_up(x: Decimal) -> Decimal:
    return x.ln(_NEAR).next_plus(_CEIL)       # ln is correctly rounded: one ulp up bounds it above


def _ln_down(x: Decimal) -> Decimal:
    return x.ln(_NEAR).next_minus(_FLOOR)


@lru_cache(maxsize=256)
def _log_inv_delta_up(delta: Decimal) -> Decimal:
    """An upper bound on ln(1/delta) (deltas repeat: the budget's, less a few delta parts)."""
    return _ln_down(delta).copy_negate()          # exact (unary minus would round to the default context)


def _eps_at(rho: Decimal, log_inv_delta_up: Decimal, alpha: Decimal,
            logs: tuple[Decimal, Decimal] | None = None) -> Decimal:
    """An upper bound on alpha rho + (L - ln alpha)/(alpha - 1) + ln(1 - 1/alpha) (claim 5).
    logs: _alpha_logs(alpha), if the caller keeps them."""
    a1 = _EXACT.subtract(alpha, _ONE)                             # exact: alpha has <= 17 digits
    ln_alpha_down, term3 = logs if logs is not None else _alpha_logs_now(alpha)
    term1 = _CEIL.multiply(alpha, rho)
    term2 = _CEIL.divide(_CEIL.subtract(log_inv_delta_up, ln_alpha_down), a1)
    return _CEIL.add(_CEIL.add(term1, term2), term3)


def _alpha_logs_now(alpha: Decimal) -> tuple[Decimal, Decimal]:
    """(a lower bound on ln alpha, an upper bound on ln(1 - 1/alpha)), _eps_at's logarithms."""
    one_minus = _CEIL.subtract(_ONE, _FLOOR.divide(_ONE, alpha))   # >= 1 - 1/alpha, in (0, 1]
    return _ln_down(alpha), _ln_up(one_minus)


def _alpha_decimal(alpha: float) -> Decimal:
    alpha = max(alpha, 1.0 + 1e-9)
    return Decimal(float.__repr__(alpha))


def epsilon_upper(rho: object, delta: object) -> Decimal:
    """An upper bound on the tight epsilon of rho-zCDP at delta (claim 5), as a Decimal; >= 0.

    rho = 0 gives 0; delta <= 0 gives Infinity (zCDP never gives delta = 0); delta >= 1 gives 0."""
    return _epsilon_upper(_as_decimal(rho), _as_decimal(delta))


@lru_cache(maxsize=1024)
def _epsilon_upper(rho: Decimal, delta: Decimal) -> Decimal:
    # cached: a charge's check and the spending shown after it convert the same total
    if rho.is_zero() or delta >= _ONE:
        return _ZERO
    if delta <= 0:
        return _INF
    if rho.is_infinite():
        return _INF
    log_inv_delta_up = _log_inv_delta_up(delta)
    alpha = _alpha_decimal(_best_alpha(float(rho), float(log_inv_delta_up)))
    return max(_eps_at(rho, log_inv_delta_up, alpha), _ZERO)


def fits(rho: object, delta_part: object, epsilon_total: object, delta_total: object) -> bool:
    """Whether a composed total (rho, delta part) is within the budget (epsilon_total, delta_total).

    Exact on the deltas, conservative on the conversion (see the module docstring)."""
    rho, part = _as_decimal(rho), _as_decimal(delta_part)
    eps_b, dlt_b = _as_decimal(epsilon_total), _as_decimal(delta_total)
    if part > dlt_b:
        return False
    if rho.is_zero():
        return True
    left = _EXACT.subtract(dlt_b, part)
    if left <= 0:
        return False
    if eps_b.is_infinite():
        return True
    # Fast path (no logarithm): rho_capacity's rho satisfies eps(alpha_c) <= eps_b at its alpha_c
    # with safe rounding, and eps(alpha_c) grows with rho, so any rho up to it fits too (claim 5
    # holds at every alpha > 1). It is computed once per (budget, delta) and kept (_capacity).
    if rho <= _capacity(eps_b, left):
        return True
    return epsilon_upper(rho, left) <= eps_b


def basic_fits(epsilon: object, delta: object, epsilon_total: object, delta_total: object) -> bool:
    """Basic sequential composition: the epsilons and the deltas each add up to within the budget."""
    return _as_decimal(epsilon) <= _as_decimal(epsilon_total) and _as_decimal(delta) <= _as_decimal(delta_total)


def epsilon_spent(rho: object, delta_part: object, delta_total: object) -> float:
    """The epsilon a composed total implies at the budget's delta, for people: an upper bound on
    the tight conversion, within a relative 1e-6 of epsilon_upper's (it is evaluated at a grid
    alpha, _grid_alpha, whose logarithms are kept: shown after every charge, it must be cheap)."""
    rho, part, dlt_b = _as_decimal(rho), _as_decimal(delta_part), _as_decimal(delta_total)
    if rho.is_zero():
        return 0.0
    left = _EXACT.subtract(dlt_b, part)
    if left <= 0:
        return math.inf
    return float(_epsilon_shown(rho, left))


@lru_cache(maxsize=1024)
def _epsilon_shown(rho: Decimal, delta: Decimal) -> Decimal:
    if delta >= _ONE:
        return _ZERO
    if rho.is_infinite():
        return _INF
    log_inv_delta_up = _log_inv_delta_up(delta)
    alpha = _alpha_decimal(_grid_alpha(_best_alpha(float(rho), float(log_inv_delta_up))))
    return max(_eps_at(rho, log_inv_delta_up, alpha, _alpha_logs(alpha)), _ZERO)


ALPHA_STEPS = 1024        # grid points per doubling of alpha - 1 (_grid_alpha)


def _grid_alpha(alpha: float) -> float:
    """The point nearest alpha of the grid alpha = 1 + 2^(k / ALPHA_STEPS), k an integer.

    Any alpha > 1 gives a valid bound (claim 5), so the grid changes only tightness: it moves
    alpha - 1 by at most 0.034%, where eps(alpha) is flat (its minimum), so the bound grows by
    a relative 2e-7 at most (tests/ledger/test_accounting.py measures it). What it buys: the
    logarithms of a grid point are computed once (_alpha_logs), and successive charges' totals
    fall on few grid points, so a charge's spending costs no Decimal logarithm."""
    k = round(math.log2(max(alpha - 1.0, 1e-9)) * ALPHA_STEPS)
    return 1.0 + 2.0 ** (k / ALPHA_STEPS)


@lru_cache(maxsize=4096)
def _alpha_logs(alpha: Decimal) -> tuple[Decimal, Decimal]:
    return _alpha_logs_now(alpha)


def _rho_at(eps_b: Decimal, log_inv_delta_up: Decimal, alpha: Decimal) -> Decimal:
    """A lower bound on the rho with eps(alpha) = eps_b: (eps_b - (L - ln a)/(a - 1) - ln(1 - 1/a)) / a."""
    a1 = _EXACT.subtract(alpha, _ONE)
    term2 = _CEIL.divide(_CEIL.subtract(log_inv_delta_up, _ln_down(alpha)), a1)
    term3 = _ln_up(_CEIL.subtract(_ONE, _FLOOR.divide(_ONE, alpha)))
    return _FLOOR.divide(_FLOOR.subtract(_FLOOR.subtract(eps_b, term2), term3), alpha)


@lru_cache(maxsize=512)
def _capacity(eps_b: Decimal, delta: Decimal) -> Decimal:
    if delta >= _ONE:
        return _INF
    if delta <= 0:
        return _ZERO
    if eps_b.is_infinite():
        return _INF
    log_inv_delta_up = _log_inv_delta_up(delta)
    eb, big_l = float(eps_b), float(log_inv_delta_up)

    def rho_float(alpha: float) -> float:
        return (eb - (big_l - math.log(alpha)) / (alpha - 1) - math.log1p(-1 / alpha)) / alpha

    # rho(alpha) is unimodal in alpha: golden-section search in log(alpha - 1)
    lo, hi = math.log(1e-9), math.log(1e9)
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = rho_float(1 + math.exp(x1)), rho_float(1 + math.exp(x2))
    for _ in range(90):
        if f1 < f2:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = rho_float(1 + math.exp(x2))
        else:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = rho_float(1 + math.exp(x1))
    alpha = _alpha_decimal(1 + math.exp(0.5 * (lo + hi)))
    return max(_rho_at(eps_b, log_inv_delta_up, alpha), _ZERO)


def rho_capacity(epsilon_total: object, delta: object) -> Decimal:
    """A lower bound on the largest rho whose conversion at delta is within epsilon_total.

    Rigorous: at the alpha found, the rho returned satisfies eps(alpha) <= epsilon_total with
    every rounding on the safe side, so ``fits(rho_capacity(e, d), 0, e, d)`` holds."""
    return _capacity(_as_decimal(epsilon_total), _as_decimal(delta))


# -- counting and planning --------------------------------------------------------------------------

def zcdp_count(spent_rho: object, spent_delta: object, rho: object, delta_part: object,
               epsilon_total: object, delta_total: object, limit: int = 10 ** 9) -> int | None:
    """How many more charges of (rho, delta part) fit after (spent_rho, spent_delta); None = unlimited."""
    s_rho, s_d = _as_decimal(spent_rho), _as_decimal(spent_delta)
    q_rho, q_d = _as_decimal(rho), _as_decimal(delta_part)
    eps_b, dlt_b = _as_decimal(epsilon_total), _as_decimal(delta_total)
    if q_rho.is_zero() and q_d.is_zero():
        return None

    def ok(k: int) -> bool:
        return fits(_EXACT.add(s_rho, _EXACT.multiply(q_rho, k)), _EXACT.add(s_d, _EXACT.multiply(q_d, k)),
                    eps_b, dlt_b)

    if not ok(0) or not ok(1):
        return 0
    hi = limit
    if q_d > 0:
        hi = min(hi, int(_EXACT.subtract(dlt_b, s_d) / q_d) + 1)      # estimates: ok() decides
    cap = rho_capacity(eps_b, _EXACT.subtract(dlt_b, s_d))
    if q_rho > 0 and cap.is_finite():
        hi = min(hi, int((cap * Decimal("1.0001") + q_rho - s_rho) / q_rho) + 2)
    if hi >= limit and ok(limit):
        return None if eps_b.is_infinite() and q_d.is_zero() else limit
    lo = 1                         # ok(lo), not ok(hi) (or hi = limit)
    while ok(hi):                  # the estimate was low (the capacity is only a lower bound)
        lo, hi = hi, min(hi * 2, limit)
        if lo == limit:
            return limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def basic_count(spent_epsilon: object, spent_delta: object, epsilon: object, delta: object,
                epsilon_total: object, delta_total: object) -> int | None:
    """How many more (epsilon, delta) charges fit under basic composition; None = unlimited."""
    e, d = _as_decimal(epsilon), _as_decimal(delta)
    left_e = _EXACT.subtract(_as_decimal(epsilon_total), _as_decimal(spent_epsilon))
    left_d = _EXACT.subtract(_as_decimal(delta_total), _as_decimal(spent_delta))
    if left_e < 0 or left_d < 0:
        return 0
    counts = []
    if e > 0 and left_e.is_finite():
        counts.append(int(_EXACT.divide_int(left_e, e)))
    if d > 0 and left_d.is_finite():
        counts.append(int(_EXACT.divide_int(left_d, d)))
    return min(counts) if counts else None


def advanced_epsilon(k: int, epsilon: float, delta_prime: float) -> float:
    """DRV10: k (epsilon, .)-DP steps are (sqrt(2k ln(1/delta')) epsilon + k epsilon (e^epsilon - 1))-DP
    with delta' added to their deltas (claim 6)."""
    if k <= 0:
        return 0.0
    if not 0 < delta_prime < 1:
        return math.inf
    return math.sqrt(2 * k * math.log(1 / delta_prime)) * epsilon + k * epsilon * math.expm1(epsilon)


def _advanced_ok(k: int, epsilon: float, delta: float, epsilon_total: float, delta_total: float) -> bool:
    left = delta_total - k * delta
    if left <= 0:
        return False
    return advanced_epsilon(k, epsilon, left) * (1 + 1e-12) <= epsilon_total


def advanced_count(epsilon: float, delta: float, epsilon_total: float, delta_total: float,
                   limit: int = 10 ** 9) -> int:
    """How many (epsilon, delta) queries fit a fresh budget under advanced composition, the slack
    delta' being what the queries' deltas leave of delta_total (a comparison, never a charge)."""
    if not _advanced_ok(1, epsilon, delta, epsilon_total, delta_total):
        return 0
    lo, hi = 1, 2
    while hi < limit and _advanced_ok(hi, epsilon, delta, epsilon_total, delta_total):
        lo, hi = hi, hi * 2
    hi = min(hi, limit)
    if _advanced_ok(hi, epsilon, delta, epsilon_total, delta_total):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _advanced_ok(mid, epsilon, delta, epsilon_total, delta_total):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class Plan:
    """k identical queries from a fresh budget under one composition rule (EXPLAIN DP)."""
    rule: str                  # basic | advanced | zcdp
    queries: int               # k
    epsilon: float             # total epsilon implied at delta
    delta: float               # total delta
    fits: bool                 # within the budget
    most: int | None           # how many such queries the whole budget buys (None: unlimited)


def plan_series(k: int, epsilon: float, delta: float, rho: object, delta_part: object,
                epsilon_total: float, delta_total: float) -> list[Plan]:
    """What k queries of per-query (epsilon, delta) and zCDP cost (rho, delta part) add up to from a
    fresh budget under basic, advanced and zCDP composition, and how many the budget buys under each."""
    out = []
    e_b = k * epsilon
    d_b = k * delta
    out.append(Plan("basic", k, e_b, d_b, basic_fits(_EXACT.multiply(Decimal(k), _as_decimal(epsilon)),
                                                    _EXACT.multiply(Decimal(k), _as_decimal(delta)),
                                                    epsilon_total, delta_total),
                    basic_count(0, 0, epsilon, delta, epsilon_total, delta_total)))
    slack = delta_total - k * delta
    e_a = advanced_epsilon(k, epsilon, slack) if slack > 0 else math.inf
    out.append(Plan("advanced", k, e_a, delta_total if slack > 0 else d_b,
                    _advanced_ok(k, epsilon, delta, epsilon_total, delta_total),
                    advanced_count(epsilon, delta, epsilon_total, delta_total)))
    q_rho, q_d = _as_decimal(rho), _as_decimal(delta_part)
    t_rho, t_d = _EXACT.multiply(q_rho, k), _EXACT.multiply(q_d, k)
    left = _EXACT.subtract(_as_decimal(delta_total), t_d)
    e_z = float(epsilon_upper(t_rho, left)) if left > 0 else (0.0 if t_rho.is_zero() else math.inf)
    out.append(Plan("zcdp", k, e_z, float(delta_total), fits(t_rho, t_d, epsilon_total, delta_total),
                    zcdp_count(0, 0, q_rho, q_d, epsilon_total, delta_total)))
    return out
