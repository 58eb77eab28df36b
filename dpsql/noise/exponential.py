"""The exponential mechanism for quantiles over a histogram of B equal-width bins, sampled exactly.

What it releases. For one group, the engine returns the per-unit-bounded counts c_0 .. c_{B-1}
of the values falling in the B equal-width bins of the declared range [lo, hi]
(dpsql.rewrite.quantiles); no row reaches Python. For a quantile q in [0, 1] let n = sum c_j,
t = q * (n - 1) the target rank (0-based, PERCENTILE_CONT's), and below_b = c_0 + ... + c_{b-1}.
The order statistics x_(below_b) .. x_(below_b + c_b - 1) lie in bin b, so bin b holds the ranks
I_b = [below_b, below_b + c_b - 1]; an empty bin lies between two order statistics, at the point
I_b = {below_b - 1/2}. The utility of bin b is minus the distance from t to I_b:

    u(b) = -d_b,   d_b = max(0, left_b - t, t - right_b),   I_b = [left_b, right_b]

(Smith 2011's intervals between order statistics, on a grid of equal-width bins, as OpenDP's
quantile scorer scores candidates). The mechanism picks bin b with probability proportional to
exp(eps_g * u(b) / (2 * m)), then releases a value drawn uniformly in [lo + b*w, lo + (b+1)*w),
w = (hi - lo) / B. MIN and MAX are q = 0 and 1: at large epsilon the first and last non-empty bins;
at small epsilon close to uniform over the empty bins beyond them (one unit can move an extreme
anywhere, so no mechanism does much better).

Claim: releasing the quantiles of every group this way is epsilon-DP for the measure's share
epsilon (adding or removing one privacy unit), and (epsilon^2 / 8)-zCDP.
Argument. (1) Sensitivity: after bounding, one unit has at most m = max_rows_per_unit rows in a
group, in at most L0 groups (dpsql.rewrite.quantiles). Write h_b = min(c_b, 1); then
left_b = below_b - 1/2 + h_b/2 and right_b = below_b + c_b - 1/2 - h_b/2. Adding k <= m rows to a
group raises n by k (t by q*k, in [0, k]), below_b by some a and c_b by some c with a + c <= k; h_b
rises (by 1) only if c >= 1, and then a <= k - 1: left_b moves by a + (rise of h_b)/2, in [0, k], and
right_b by a + c - (rise of h_b)/2, in [0, k] (removing a unit is the same step backwards). So left_b - t moves within [-k, k], t - right_b within
[-k, k], and d_b, a max of 0 and these, by at most k <= m for every b: Delta u = m. (2) Per group, the exponential mechanism
with exp(eps_g * u / (2 Delta u)) is eps_g-DP (McSherry & Talwar, FOCS 2007; Dwork & Roth 2014,
Thm 3.10); the uniform draw inside the chosen bin is post-processing (fresh randomness, independent
of the data). (3) Each group gets eps_g = epsilon / L0: one unit changes at most L0 groups'
histograms, the other groups' outputs have identical distributions, so by composition the whole
release is (L0 * eps_g) = epsilon-DP. (4) zCDP: the exponential mechanism with eps_g is eps_g-bounded
range (Durfee & Rogers, NeurIPS 2019), and eps-bounded range implies (eps^2 / 8)-zCDP (Cesar &
Rogers, ALT 2021, Lemma 3.2); over the L0 changed groups rho = L0 * eps_g^2 / 8 = epsilon^2 / (8 L0)
<= epsilon^2 / 8 (we charge the exact L0 value).
Floating point: none in the choice. eps_g (a float's exact rational), q (the query's decimal literal,
exact) and the counts are rationals, so every weight's exponent gamma_b = eps_g * d_b / (2m) is an
exact Fraction. The bin is drawn by rejection: propose b uniformly (rng.randbelow(B)), accept with
probability exp(-(gamma_b - min gamma)) by the exact Bernoulli(exp(-gamma)) sampler of Canonne, Kamath
& Steinke 2020 (Alg. 1, dpsql.noise.samplers); accepted draws have exactly the distribution
P(b) proportional to exp(-gamma_b). Only the final uniform draw inside the bin is float arithmetic,
and it is a function of the (already private) bin and fresh randomness.
Running time: at most B expected proposals (the best bin is accepted with probability 1); the number
depends on the data, like the engine's own run time, and is covered by the release-time quantum
([timing]); it is far below the engine's time (microseconds per proposal).
Accuracy (95%): with probability >= 1 - beta the chosen bin's utility is at least
-(2m / eps_g) * (ln B + ln(1/beta)) (Dwork & Roth 2014, Thm 3.11, OPT = 0 since some bin's interval
holds t): the released value's rank is within that many rows of q*n, and within the bin's width w.
Assumes: SecureRng (or a seeded Rng in tests); counts are the bounded counts described above.
Source: McSherry & Talwar 2007; Smith, "Privacy-preserving statistical estimation with optimal
convergence rates", STOC 2011; Dwork & Roth 2014 Thms 3.10-3.11; Durfee & Rogers 2019; Cesar & Rogers
2021; Canonne, Kamath & Steinke 2020 (docs/REFERENCES-quantiles.md).
Test: tests/noise/test_exponential.py, tests/stats/test_quantile_neighbours.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from dpsql.errors import InternalError, InvalidSetting
from dpsql.noise.rng import Rng, SecureRng
from dpsql.noise.samplers import bernoulli_exp

__all__ = ["BINS", "QuantileEM", "parse_histogram"]

BINS = 1024           # equal-width bins over the declared range


@dataclass(frozen=True, slots=True)
class QuantileEM:
    """The quantile q of each group's bounded histogram (module docstring).

    epsilon: this measure's share of the query epsilon, over all groups; l0: groups per unit;
    rows: each unit's row bound per group (Delta u); lo, hi: the declared range; bins: B."""
    epsilon: float
    q: Fraction
    lo: Fraction
    hi: Fraction
    rows: int = 1
    l0: int = 1
    bins: int = BINS
    _c: Fraction = field(init=False, repr=False, compare=False)

    name = "exponential"

    def __post_init__(self) -> None:
        e = float(self.epsilon)
        if not (math.isfinite(e) and e > 0):
            raise InvalidSetting("exponential: epsilon must be finite and > 0")
        if not 0 <= self.q <= 1:
            raise InvalidSetting("exponential: the quantile must be in [0, 1]")
        if not self.lo < self.hi:
            raise InvalidSetting("exponential: the range must have lo < hi")
        if self.rows < 1 or self.l0 < 1 or self.bins < 1:
            raise InvalidSetting("exponential: rows, l0 and bins must be >= 1")
        object.__setattr__(self, "_c", self.eps_group / (2 * self.rows))

    @property
    def eps_group(self) -> Fraction:
        """Each group's epsilon: the share over the L0 groups one unit can change."""
        return Fraction(self.epsilon) / self.l0

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def scale(self) -> float:
        """The mechanism's temperature in ranks: P(b) ~ exp(-d_b / scale), scale = 2m / eps_g."""
        return float(1 / self._c)

    def rank_error(self, alpha: float = 0.05) -> float:
        """With probability >= 1 - alpha the released value's rank is within this many rows of q*n."""
        return self.scale * (math.log(self.bins) + math.log(1 / alpha))

    def half_width(self, alpha: float = 0.05) -> float:
        """The 95% accuracy statement, in ranks (rows), not value units: rank_error."""
        return self.rank_error(alpha)

    @property
    def rho(self) -> Fraction:
        """zCDP cost: L0 groups of eps_g-bounded-range choices, each eps_g^2/8-zCDP (Cesar & Rogers
        2021): L0 * eps_g^2 / 8, exact."""
        return self.l0 * self.eps_group * self.eps_group / 8

    def params(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "epsilon_per_group": float(self.eps_group),
                "quantile": float(self.q), "bins": self.bins, "rank_sensitivity": self.rows,
                "lower": float(self.lo), "upper": float(self.hi), "scale": self.scale, "delta": 0.0}

    def distances(self, counts: list[int]) -> tuple[list[int], int]:
        """(D_b, den): d_b = D_b / den exactly, D_b integers, so that gamma_b = eps_g * D_b / (2m * den).
        Integer arithmetic (everything times 2 * q's denominator): one pass over the B bins."""
        a, qden = self.q.numerator, self.q.denominator
        n = sum(counts)
        t2 = 2 * a * (n - 1)                   # 2 * qden * t, t = q * (n - 1)
        out, below = [], 0
        for c in counts:
            h = 1 if c else 0
            left = qden * (2 * below + h - 1)   # 2 * qden * (below - 1/2 + h/2)
            right = qden * (2 * below + 2 * c - 1 - h)
            out.append(left - t2 if left > t2 else t2 - right if t2 > right else 0)
            below += c
        return out, 2 * qden

    def gammas(self, counts: list[int]) -> list[Fraction]:
        """gamma_b = eps_g * d_b / (2m), exact, for the B bins (counts: B non-negative ints)."""
        d, den = self.distances(counts)
        return [self._c * Fraction(x, den) for x in d]

    def choose(self, counts: list[int], rng: Rng | None = None) -> int:
        """The chosen bin, with probability exactly proportional to exp(-gamma_b): propose b
        uniformly, accept with probability exp(-(gamma_b - min gamma)) (exact Bernoulli)."""
        rng = rng if rng is not None else SecureRng()
        d, den = self.distances(counts)
        low = min(d)
        num, cden = self._c.numerator, self._c.denominator * den
        while True:
            b = rng.randbelow(self.bins)
            if bernoulli_exp(Fraction(num * (d[b] - low), cden), rng):
                return b

    def value(self, b: int, rng: Rng | None = None) -> float:
        """A value uniform in bin b (53 random bits), inside [lo, hi]."""
        rng = rng if rng is not None else SecureRng()
        u = Fraction(rng.randbits(53), 1 << 53)
        w = (self.hi - self.lo) / self.bins
        return float(min(self.hi, self.lo + (b + u) * w))

    def release(self, histogram: object, rng: Rng | None = None) -> float:
        """The released quantile from the engine's histogram text (parse_histogram)."""
        rng = rng if rng is not None else SecureRng()
        return self.value(self.choose(parse_histogram(histogram, self.bins), rng), rng)


def parse_histogram(text: object, bins: int = BINS) -> list[int]:
    """The engine's 'bin:count,bin:count' text (NULL: no rows) as B counts.

    The text is built by the rewrite from integers it computed itself (bins in [0, B), counts >= 1),
    so it always has that form; anything else means the engine did not run the query dpsql wrote,
    and nothing is released (InternalError, whose message quotes nothing). Never raises otherwise."""
    counts = [0] * bins
    if text is None:
        return counts
    if not isinstance(text, str):
        raise InternalError("the engine returned a histogram in an unexpected form; nothing was released")
    if not text:
        return counts
    for item in text.split(","):
        b, sep, c = item.partition(":")
        b, c = b.strip(), c.strip()
        if not (sep and b.isdigit() and c.isdigit() and len(b) < 8 and len(c) < 20):
            raise InternalError("the engine returned a histogram in an unexpected form; nothing was released")
        i, n = int(b), int(c)
        if i >= bins:
            raise InternalError("the engine returned a histogram in an unexpected form; nothing was released")
        counts[i] += n
    return counts
