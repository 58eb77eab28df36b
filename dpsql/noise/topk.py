"""Report-noisy-max for top-k: which k keys of a public domain have the largest scores, sampled exactly.

What it releases. The engine returns, for every key of a public domain (declared, a public table's
column, or a derived public domain), one per-unit-bounded aggregate (a COUNT, or a SUM over a
bounded column), computed by the ordinary rewrite (per-unit bounding, clamping, the salted group
choice; dpsql.rewrite); no row reaches Python. Call these the scores u_1 .. u_D. The mechanism
releases k distinct keys in rank order, chosen by k-fold peeling of the exponential mechanism: at
step j = 1..k, among the keys not yet chosen, key i is picked with probability proportional to
exp(c * u_i), where

    c = eps_step / Delta        when the scores are monotone (see below)
    c = eps_step / (2 Delta)    otherwise,           eps_step = epsilon / k.

(ORDER BY ... ASC, the bottom k, uses u_i = -aggregate: the same mechanism.) Peeling is the same
distribution as the one-shot top-k of the scores plus independent Gumbel(1/c) noise (Durfee &
Rogers, "Practical Differentially Private Top-k Selection with Pay-what-you-get Composition",
NeurIPS 2019, Section 4.1 "Exponential Mechanism and Gumbel Noise": one-shot Gumbel top-k and
peeling the exponential mechanism have identical output distributions); we sample the peeling
form, because each peel can be sampled exactly (below), where the Gumbel form would need
floating-point logarithms.

Sensitivity. Delta is the per-group L-infinity bound of the aggregate after bounding
(Measure.per_group_bound, dpsql.analysis.measures): 1 for COUNT(*) with max_rows_per_unit 1,
m * max(|lo|, |hi|) for SUM. It is NOT multiplied by L0 (the groups one unit may touch): the
exponential mechanism's sensitivity is max over candidates i of |u_i(D) - u_i(D')|, the largest
move of any ONE score, however many scores move. That is why selecting the top k costs less than
releasing the whole histogram, whose L1 sensitivity is L0 * Delta.

Monotonicity. The scores are monotone when, between any two neighbours D (without the unit) and
D' (with it), every score moves in the same direction: u_i(D') >= u_i(D) for all i. After bounding,
one unit adds its own clamped contribution to each of the (at most L0) groups its salted hash
chose, and changes no other unit's contribution (dpsql.rewrite.group_choice: the choice depends on
the unit's own key and rows only). A COUNT contribution is in [0, m]; a SUM contribution is in
[m*lo, m*hi]. So COUNT, and SUM with lo >= 0, are monotone non-decreasing; SUM with hi <= 0 is
monotone non-increasing (in the other direction for every key, which is the same case); SUM with
bounds that straddle 0 is not monotone (one key may rise while another falls) and uses 2 Delta.
Negating every score (bottom-k) keeps a monotone family monotone.

Claim: the release of the k keys is epsilon-DP (adding or removing one privacy unit), and
(k * eps_step^2 / 8) = (epsilon^2 / (8k))-zCDP.
Argument. (1) One peel, on the remaining candidate set R (fixed by the earlier outputs), is the
exponential mechanism with utility u and sensitivity Delta: with c = eps_step / (2 Delta) it is
eps_step-DP (McSherry & Talwar, FOCS 2007; Dwork & Roth 2014, Thm 3.10); with monotone scores and
c = eps_step / Delta it is eps_step-DP too (McSherry & Talwar 2007; Dwork & Roth 2014, Section 3.4:
when all utilities move in the same direction the normaliser moves with them, so the two factors of
exp(eps/2) become one factor exp(eps)). (2) k peels compose adaptively: k * eps_step =
epsilon. (3) zCDP: write p(i) = exp(c u_i) / Z. For any two candidates i, j,
log(p_D(i)/p_D'(i)) - log(p_D(j)/p_D'(j)) = c[(u_i(D) - u_i(D')) - (u_j(D) - u_j(D'))], at most
2 Delta c = eps_step in general, and at most Delta c = eps_step when the scores are monotone (both
differences have the same sign and absolute value <= Delta). So each peel is eps_step-bounded range
(Durfee & Rogers 2019, Section 4.2 "Bounded Range Composition"), and an
eps-bounded-range mechanism is (eps^2 / 8)-zCDP (Cesar & Rogers, "Bounding, Concentrating, and
Truncating: Unifying Privacy Loss Composition for Data Analytics", ALT 2021, Lemma 3.2). zCDP
composes adaptively over the k peels: rho = k * eps_step^2 / 8 = epsilon^2 / (8 k). We charge
exactly that rho (a Fraction), and epsilon under the basic accountant. (Durfee & Rogers' tighter
(epsilon, delta) bound for one-shot top-k is not used: the zCDP ledger's conversion already gets
the sqrt(k) behaviour.)
Floating point: none in the choice. epsilon is a float's exact rational, Delta a Fraction, the
scores exact integers or Decimals turned into Fractions and then integers on their common
denominator, so every exponent gamma_i = c * (max_R u - u_i) >= 0 is an exact ratio of integers.
Each peel draws by rejection: propose i
uniformly in R (rng.randbelow), accept with probability exp(-gamma_i) by the exact Bernoulli(exp(-g))
sampler of Canonne, Kamath & Steinke 2020 (Alg. 1, dpsql.noise.samplers). Accepted draws have
exactly P(i) proportional to exp(c u_i) on R; the best key is accepted with probability 1, so the
expected number of proposals is at most |R| per peel.
Running time: at most k * D expected proposals (a few CSPRNG reads each, 10-40 microseconds);
dpsql.analysis.topk refuses k * D above MAX_WORK (100,000). It depends on the data like the
engine's own run time and is covered by the release-time quantum ([timing]), as for quantiles
(dpsql.noise.exponential).
Accuracy: with probability >= 1 - beta, each peel's key has a score within
(ln |R| + ln(k / beta)) / c of the best remaining score (Dwork & Roth 2014, Thm 3.11, union bound
over the k peels): `score_gap`.
Assumes: SecureRng (or a seeded Rng in tests); the scores are the bounded aggregates above.
Source: McSherry & Talwar 2007; Dwork & Roth 2014 Thms 3.10-3.11; Durfee & Rogers 2019; Cesar &
Rogers 2021; Canonne, Kamath & Steinke 2020.
Test: tests/noise/test_topk_mechanism.py, tests/stats/test_topk_neighbours.py,
tests/analysis/test_topk_analysis.py, tests/integration/test_topk.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from dpsql.errors import InvalidSetting
from dpsql.noise.rng import Rng, SecureRng
from dpsql.noise.samplers import _bernoulli_exp    # exact Bernoulli(exp(-num/den)) on integers

__all__ = ["NoisyTopK"]


@dataclass(frozen=True, slots=True)
class NoisyTopK:
    """Top-k selection by peeling the exponential mechanism (module docstring).

    epsilon: the selection's share of the query epsilon, over all k peels; k: keys released;
    sensitivity: Delta, the per-group L-infinity bound of the score; monotone: whether every score
    moves in the same direction between neighbours; candidates: the public domain's size D."""
    epsilon: float
    k: int
    sensitivity: Fraction
    monotone: bool
    candidates: int
    _c: Fraction = field(init=False, repr=False, compare=False)

    name = "noisy_max"

    def __post_init__(self) -> None:
        e = float(self.epsilon)
        if not (math.isfinite(e) and e > 0):
            raise InvalidSetting("noisy_max: epsilon must be finite and > 0")
        if not 1 <= self.k <= self.candidates:
            raise InvalidSetting("noisy_max: k must be between 1 and the number of candidates")
        if not Fraction(self.sensitivity) > 0:
            raise InvalidSetting("noisy_max: the sensitivity must be > 0")
        object.__setattr__(self, "sensitivity", Fraction(self.sensitivity))
        d = self.sensitivity if self.monotone else 2 * self.sensitivity
        object.__setattr__(self, "_c", self.eps_step / d)

    @property
    def eps_step(self) -> Fraction:
        """Each peel's epsilon: epsilon / k, exact."""
        return Fraction(self.epsilon) / self.k

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def scale(self) -> float:
        """The temperature in score units: P(i) ~ exp(u_i / scale), scale = Delta / eps_step (monotone)
        or 2 Delta / eps_step; also the scale of the equivalent one-shot Gumbel noise."""
        return float(1 / self._c)

    def score_gap(self, alpha: float = 0.05) -> float:
        """With probability >= 1 - alpha every chosen key's score is within this of the best score
        left at its peel (Dwork & Roth Thm 3.11, a union bound over the k peels)."""
        return self.scale * (math.log(self.candidates) + math.log(self.k / alpha))

    def half_width(self, alpha: float = 0.05) -> float:
        """For the accuracy report: the score gap (in score units), not an interval around a value."""
        return self.score_gap(alpha)

    @property
    def rho(self) -> Fraction:
        """zCDP cost: k peels, each eps_step-bounded range, so eps_step^2 / 8 each (Cesar & Rogers
        2021): k * eps_step^2 / 8 = epsilon^2 / (8k), exact."""
        return self.k * self.eps_step * self.eps_step / 8

    def params(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "epsilon_per_peel": float(self.eps_step),
                "k": self.k, "candidates": self.candidates, "score_sensitivity": float(self.sensitivity),
                "monotone": self.monotone, "scale": self.scale, "delta": 0.0}

    def choose(self, scores: Sequence[Fraction | int], rng: Rng | None = None) -> list[int]:
        """The indexes of the k chosen keys, in rank order (best first), with exactly the distribution
        of k peels of the exponential mechanism exp(c * u) on the scores (module docstring)."""
        rng = rng if rng is not None else SecureRng()
        if len(scores) != self.candidates:
            raise InvalidSetting("noisy_max: one score per candidate is needed")
        u = [Fraction(s) for s in scores]
        # integers on a common denominator: gamma_i = c * (top - u_i) = num * (TOP - U_i) / den, exactly
        common = math.lcm(*(x.denominator for x in u))
        big = [x.numerator * (common // x.denominator) for x in u]
        num, den = self._c.numerator, self._c.denominator * common
        left = list(range(len(u)))
        out = []
        for _ in range(self.k):
            top = max(big[i] for i in left)
            while True:
                j = rng.randbelow(len(left))
                i = left[j]
                if _bernoulli_exp(num * (top - big[i]), den, rng):
                    break
            out.append(i)
            left[j] = left[-1]       # remove i (order of `left` is irrelevant: proposals are uniform)
            left.pop()
        return out
