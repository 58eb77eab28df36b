"""The noise each query shape gets, planned by the analyzer alone (no engine), against a table
written by hand from the test policy's bounds (tests/analysis/checker.py):

    people:  max_rows_per_unit m = 3, max_groups_per_unit = 2, age in [0, 120], income in [0, 500000]
    visits:  m = 5, max_groups_per_unit = 2, cost in [0, 1000]
    notes:   m = 4 (linked to visits), words in [0, 500]
    staff:   m = 1 (the default), salary in [0, 300000]

The formulas (the sensitivity of one part over all groups a unit can touch, l0 of them):

    COUNT(*)                Linf = m
    SUM(x), x in [lo, hi]   Linf = m * max(|lo|, |hi|)
    AVG(x) = mid + centered sum / count: the centered sum of (x - mid), Linf = m * (hi - lo) / 2,
                            and a COUNT (Linf = m)
    VARIANCE/STDDEV(x)      AVG's two parts and the sum of (2x - lo - hi)^2 / 4, Linf = m * ((hi - lo) / 2)^2
    COUNT(DISTINCT unit)    Linf = 1 (each unit counted once per group)
    COUNT(DISTINCT col)     Linf = m (a unit's rows bring at most m values)
    quantile (exponential)  Linf = m (the utility of a rank moves by a unit's rows)
    a join                  m = the product of the joined tables' m
    L1 = l0 * Linf, L2 = sqrt(l0) * Linf

Epsilon is split equally among the parts (every noisy measure, quantile and distinct count, plus
partition selection when a key has no public domain); delta goes, equally, to the Gaussian parts
and to partition selection (a Laplace part has delta 0). Partition selection's own noise is
Laplace on the distinct-unit count: Linf = 1.

The mechanism is compared as a string (it may become a str Enum; its values stay the same).
"""
from __future__ import annotations

import math

import pytest

from dpsql.analysis.analyze import Settings, analyze
from dpsql.analysis.parse import classify
from tests.analysis.checker import POLICY, SCHEMA, public_domain

LAP = Settings(epsilon=1.0, delta=1e-6, mechanism="laplace")
LAP2 = Settings(epsilon=2.0, delta=1e-5, mechanism="laplace")
GAUSS = Settings(epsilon=1.0, delta=1e-6, mechanism="gaussian")
CLASSIC = Settings(epsilon=1.0, delta=1e-6, mechanism="gaussian_classic")


def spec(mechanism: str, linf: float, l0: int, epsilon: float, delta: float = 0.0) -> tuple:
    """(mechanism, L1, L2, Linf, epsilon, delta) from the per-group bound and l0."""
    return (mechanism, l0 * linf, math.sqrt(l0) * linf, linf, epsilon, delta)


SELECTION = "selection"      # marks the partition-selection spec in an expected tuple list

# (query, settings, expected NoiseSpec tuples in plan order; ("selection", spec) for the _units noise)
CASES = [
    # COUNT: Linf = m = 3, one group (l0 = 1) or GROUP BY with max_groups_per_unit 2 (l0 = 2)
    ("SELECT COUNT(*) FROM people", LAP, [spec("laplace", 3, 1, 1.0)]),
    ("SELECT state, COUNT(*) FROM people GROUP BY state", LAP, [spec("laplace", 3, 2, 1.0)]),
    ("SELECT kind, COUNT(*) FROM visits GROUP BY kind", LAP, [spec("laplace", 5, 2, 1.0)]),
    ("SELECT COUNT(*) FROM staff", LAP2, [spec("laplace", 1, 1, 2.0)]),
    # SUM: Linf = m * max(|lo|, |hi|)
    ("SELECT SUM(income) FROM people", LAP, [spec("laplace", 3 * 500000, 1, 1.0)]),
    ("SELECT state, SUM(age) FROM people GROUP BY state", LAP, [spec("laplace", 3 * 120, 2, 1.0)]),
    ("SELECT SUM(age - 60) FROM people", LAP, [spec("laplace", 3 * 60, 1, 1.0)]),     # x in [-60, 60]
    ("SELECT SUM(cost) FROM visits", LAP, [spec("laplace", 5 * 1000, 1, 1.0)]),
    ("SELECT SUM(salary) FROM staff", LAP, [spec("laplace", 1 * 300000, 1, 1.0)]),
    # a WHERE does not narrow the clip range (the bounds are the policy's)
    ("SELECT state, SUM(age) FROM people WHERE age BETWEEN 10 AND 20 GROUP BY state", LAP,
     [spec("laplace", 3 * 120, 2, 1.0)]),
    # two measures: epsilon halved
    ("SELECT COUNT(*), SUM(age) FROM people", LAP,
     [spec("laplace", 3, 1, 0.5), spec("laplace", 3 * 120, 1, 0.5)]),
    # AVG: centered sum (m * (hi - lo) / 2) and count, epsilon halved
    ("SELECT AVG(age) FROM people", LAP, [spec("laplace", 3 * 60, 1, 0.5), spec("laplace", 3, 1, 0.5)]),
    ("SELECT state, AVG(income) FROM people GROUP BY state", LAP,
     [spec("laplace", 3 * 250000, 2, 0.5), spec("laplace", 3, 2, 0.5)]),
    ("SELECT AVG(words) FROM notes", LAP2, [spec("laplace", 4 * 250, 1, 1.0), spec("laplace", 4, 1, 1.0)]),
    # VARIANCE: three parts, epsilon / 3
    ("SELECT VARIANCE(age) FROM people", LAP,
     [spec("laplace", 3 * 60, 1, 1 / 3), spec("laplace", 3, 1, 1 / 3), spec("laplace", 3 * 60 ** 2, 1, 1 / 3)]),
    # COUNT(DISTINCT): of the unit (Linf 1), of another column (Linf m)
    ("SELECT COUNT(DISTINCT person_id) FROM people", LAP, [spec("laplace", 1, 1, 1.0)]),
    ("SELECT COUNT(DISTINCT kind) FROM visits", LAP2, [spec("laplace", 5, 1, 2.0)]),
    # a join: m = 3 * 5
    ("SELECT COUNT(*) FROM people p JOIN visits v ON p.person_id = v.person_id", LAP2,
     [spec("laplace", 3 * 5, 1, 2.0)]),
    # quantiles: the exponential mechanism, Linf = m
    ("SELECT MEDIAN(age) FROM people", LAP, [spec("exponential", 3, 1, 1.0)]),
    ("SELECT state, MEDIAN(age) FROM people GROUP BY state", LAP2, [spec("exponential", 3, 2, 2.0)]),
    # a key with no public domain: partition selection takes a part of epsilon and all of delta
    ("SELECT city, COUNT(*) FROM people GROUP BY city", LAP,
     [spec("laplace", 3, 2, 0.5), (SELECTION, spec("laplace", 1, 2, 0.5))]),
    # Gaussian: delta split among the Gaussian parts (and selection)
    ("SELECT state, COUNT(*), SUM(age) FROM people GROUP BY state", GAUSS,
     [spec("gaussian", 3, 2, 0.5, 5e-7), spec("gaussian", 3 * 120, 2, 0.5, 5e-7)]),
    ("SELECT city, COUNT(*) FROM people GROUP BY city", GAUSS,
     [spec("gaussian", 3, 2, 0.5, 5e-7), (SELECTION, spec("laplace", 1, 2, 0.5, 0.0))]),
    ("SELECT STDDEV(age) FROM people", GAUSS,
     [spec("gaussian", 3 * 60, 1, 1 / 3, 1e-6 / 3), spec("gaussian", 3, 1, 1 / 3, 1e-6 / 3),
      spec("gaussian", 3 * 60 ** 2, 1, 1 / 3, 1e-6 / 3)]),
    ("SELECT COUNT(*) FROM people", CLASSIC, [spec("gaussian_classic", 3, 1, 1.0, 1e-6)]),
]


def _tuple(n) -> tuple:
    return (str(getattr(n.mechanism, "value", n.mechanism)), n.l1, n.l2, n.linf, n.epsilon, n.delta)


@pytest.mark.parametrize("query,settings,expected", CASES,
                         ids=[f"{s.mechanism}:{q}" for q, s, _ in CASES])
def test_noise_spec(query, settings, expected):
    plan = analyze(classify(query).tree, POLICY, SCHEMA, settings, "duckdb", public_domain)
    measures = [e for e in expected if e[0] != SELECTION]
    selection = [e[1] for e in expected if e[0] == SELECTION]
    assert len(plan.noise) == len(measures), [_tuple(n) for n in plan.noise]
    for got, want in zip(plan.noise, measures):
        g = _tuple(got)
        assert g[0] == want[0], (query, g)
        assert g[1:] == pytest.approx(want[1:], rel=1e-12), (query, g, want)
    if selection:
        assert plan.selection_noise is not None and plan.selection is not None
        g = _tuple(plan.selection_noise)
        assert g[0] == selection[0][0] and g[1:] == pytest.approx(selection[0][1:], rel=1e-12), g
        # the threshold's Selection carries the same share of epsilon and the delta left to it
        assert plan.selection.epsilon == pytest.approx(selection[0][4], rel=1e-12)
        assert plan.selection.l0 == round(selection[0][1])
        assert plan.selection.delta == pytest.approx(settings.delta / (len(measures) + 1)
                                                     if settings.mechanism != "laplace" else settings.delta,
                                                     rel=1e-12)
    else:
        assert plan.selection_noise is None and plan.selection is None
    # the plan's cost is the whole epsilon, and delta only when some part uses it
    uses_delta = bool(selection) or any(e[5] for e in measures)
    assert plan.cost.epsilon == pytest.approx(settings.epsilon)
    assert plan.cost.delta == (settings.delta if uses_delta else 0.0)


def test_sensitivity_follows_the_mechanism():
    """Laplace calibrates to L1, the Gaussian mechanisms to L2."""
    grouped = "SELECT state, COUNT(*) FROM people GROUP BY state"
    lap = analyze(classify(grouped).tree, POLICY, SCHEMA, LAP, "duckdb", public_domain).noise[0]
    gauss = analyze(classify(grouped).tree, POLICY, SCHEMA, GAUSS, "duckdb", public_domain).noise[0]
    assert lap.sensitivity == lap.l1 == 6.0
    assert gauss.sensitivity == gauss.l2 == pytest.approx(3 * math.sqrt(2), rel=1e-12)
