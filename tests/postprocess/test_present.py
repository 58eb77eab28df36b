"""Accuracy of derived values by simulation, and the presentation settings (intervals, rounding,
no -0.0): post-processing of released values only."""
from __future__ import annotations

import math

import pytest

from dpsql import postprocess
from dpsql.noise import make_mechanism
from dpsql.noise.rng import SeededRng


def test_simulated_width_of_a_plain_value_is_the_mechanisms():
    m = make_mechanism("laplace", 1.0, 0.5, 0.0)
    draws = postprocess.noise_draws({"c": ("laplace", m.scale)})
    w = postprocess.simulated_half_width(("ref", "c"), {"c": 100.0}, draws, ())
    assert w == pytest.approx(m.half_width(), rel=0.06)
    g = make_mechanism("gaussian", 1.0, 0.5, 1e-6)
    draws = postprocess.noise_draws({"c": ("gaussian", g.scale)})
    assert postprocess.simulated_half_width(("ref", "c"), {"c": 3.0}, draws, ()) == pytest.approx(g.half_width(), rel=0.06)


def test_simulation_is_a_function_of_released_values_only():
    """Fixed public seed: the same released values and parameters give the same width."""
    noise = {"s": ("laplace", 50.0), "c": ("laplace", 2.0)}
    expr = ("avg", "s", "c", 0.0, 100.0)
    a = postprocess.simulated_half_width(expr, {"s": -400.0, "c": 200.0}, postprocess.noise_draws(noise), ())
    b = postprocess.simulated_half_width(expr, {"s": -400.0, "c": 200.0}, postprocess.noise_draws(noise), ())
    assert a == b and a > 0


@pytest.mark.parametrize("kind", ["avg", "ratio", "difference"])
def test_derived_half_width_covers_the_true_value_95_percent(kind):
    """Seeded: 2000 releases of AVG (noisy centred sum / noisy count), SUM/COUNT and COUNT - COUNT;
    the true value lies within the released value +- its simulated half-width in 92-98% of them
    (the binomial's sd is 0.49%: the band is 6 sd, a false failure below 1e-8)."""
    rng = SeededRng(20261125)
    ms = make_mechanism("laplace", 50.0, 0.5, 0.0)      # sum of x - mid, x in [0, 100]
    mc = make_mechanism("laplace", 1.0, 0.5, 0.0)
    s_true, c_true = -400, 60
    if kind == "avg":
        expr, truth = ("avg", "s", "c", 0.0, 100.0), 50 + s_true / c_true
    elif kind == "ratio":
        expr, truth = ("div", ("ref", "s"), ("ref", "c")), s_true / c_true
    else:
        expr, truth = ("sub", ("ref", "s"), ("ref", "c")), s_true - c_true
    noise = {"s": ("laplace", ms.scale), "c": ("laplace", mc.scale)}
    draws = postprocess.noise_draws(noise)
    hits, n = 0, 2000
    for _ in range(n):
        env = {"s": ms.release(s_true, rng), "c": mc.release(c_true, rng)}
        v = postprocess.evaluate(expr, env, ())
        w = postprocess.simulated_half_width(expr, env, draws, ())
        assert w is not None and math.isfinite(w)
        hits += abs(v - truth) <= w
    assert 0.92 <= hits / n <= 0.98, hits / n


def test_quotient_by_a_count_near_zero_is_unbounded():
    noise = {"s": ("laplace", 10.0), "c": ("laplace", 10.0)}
    w = postprocess.simulated_half_width(("div", ("ref", "s"), ("ref", "c")), {"s": 5.0, "c": 0.5},
                                         postprocess.noise_draws(noise), ())
    assert w is None or w > 100


def test_finish_uses_simulation_for_derived_and_the_mechanism_for_plain_values():
    rows = [((), {"s": -400.0, "c": 60.0}, {"s": 300.0, "c": 6.0})]
    outputs = [("a", ("avg", "s", "c", 0.0, 100.0), True), ("n", ("ref", "c"), True)]
    t = postprocess.finish(rows, outputs, None, [], None, 0, {"s": ("laplace", 100.0), "c": ("laplace", 2.0)})
    hw = t.widths[0]
    assert hw[1] == 6.0                     # the mechanism's own
    assert hw[0] is not None and 0 < hw[0] < 50


def _present(rows, widths, *, intervals=False, round_counts=False):
    return postprocess.present(["state", "n", "a"], ["string", "number", "number"], ["VARCHAR", "DOUBLE", "DOUBLE"],
                               rows, [None, "acc-n", "acc-a"], widths, [False, True, False], [False, True, True],
                               intervals=intervals, round_counts=round_counts)


def test_no_negative_zero_anywhere():
    _, _, _, rows, _, _ = _present([("CA", -0.0, -0.0)], [(None, 1.0, 1.0)], intervals=True)
    for v in rows[0][1:]:
        assert not (isinstance(v, float) and math.copysign(1.0, v) < 0 and v == 0)
    assert "-0.0" not in repr(rows)
    _, _, _, rows, _, _ = _present([("CA", -0.3, 0.0)], [(None, 1.0, 1.0)], round_counts=True)
    assert rows[0][1] == 0 and isinstance(rows[0][1], int) and "-0" not in repr(rows)


def test_round_counts_is_off_by_default_and_clamps_only_when_on():
    _, _, db, rows, _, _ = _present([("CA", -3.4, 2.5)], [(None, 1.0, 1.0)])
    assert rows[0][1] == -3.4 and db[1] == "DOUBLE"
    _, _, db, rows, _, _ = _present([("CA", -3.4, 2.5), ("NY", 41.6, 2.5)], [(None, 1.0, 1.0)] * 2, round_counts=True)
    assert [r[1] for r in rows] == [0, 42] and db[1] == "BIGINT"
    assert rows[0][2] == 2.5                # only counts are rounded


def test_intervals_follow_each_noisy_column():
    cols, _, db, rows, acc, widths = _present([("CA", 40.0, 2.5)], [(None, 6.0, None)], intervals=True)
    assert cols == ["state", "n", "n_low", "n_high", "a", "a_low", "a_high"]
    assert rows[0] == ("CA", 40.0, 34.0, 46.0, 2.5, None, None)     # unbounded width: NULL interval
    assert acc == [None, "acc-n", None, None, "acc-a", None, None] and len(widths[0]) == 7
    _, _, db, rows, _, _ = _present([("CA", 2.0, 2.5)], [(None, 6.0, 1.0)], intervals=True, round_counts=True)
    assert rows[0][1:4] == (2, 0, 8) and db[1:4] == ["BIGINT"] * 3


def test_many_rows_use_fewer_draws_and_stay_close():
    """Beyond 500 rows the draws per row shrink (a function of the row count only), widths stay
    within a few percent of the full simulation's."""
    assert postprocess.draws_for(10) == postprocess.SIM_DRAWS
    assert postprocess.draws_for(100_000) == postprocess.SIM_MIN_DRAWS
    noise = {"s": ("laplace", 100.0), "c": ("laplace", 2.0)}
    expr = ("avg", "s", "c", 0.0, 100.0)
    env = {"s": -400.0, "c": 60.0}
    full = postprocess.simulated_half_width(expr, env, postprocess.noise_draws(noise), ())
    few = postprocess.simulated_half_widths(expr, [env] * 3, postprocess.noise_draws(noise, 400), [()] * 3)
    assert few[0] == few[1] == few[2] and abs(few[0] - full) / full < 0.25


def test_avg_interval_is_cut_to_the_declared_bounds():
    _, _, _, rows, _, _ = postprocess.present(["a"], ["number"], ["DOUBLE"], [(118.0,)], [None], [(5.0,)],
                                              [False], [True], intervals=True, round_counts=False,
                                              bounds=[(0.0, 120.0)])
    assert rows[0] == (118.0, 113.0, 120.0)
