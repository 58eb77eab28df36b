"""Post-processing on noisy rows: expressions, intervals, HAVING, ORDER BY, LIMIT."""
from __future__ import annotations

import math

import pytest

from dpsql.postprocess import (
    Add, And, Avg, Cmp, Div, IsNull, Key, Lit, Mul, Neg, Not, Or, Ref, Sub, Var, finish, half_width,
)

ENV = {"_v0": 10.0, "_v1": -4.0, "_v2": 0.0}
W = {"_v0": 1.0, "_v1": 2.0, "_v2": 0.5}


@pytest.mark.parametrize("expr, value", [
    (Add(Ref("_v0"), Lit(2.0)), 12.0),
    (Sub(Ref("_v0"), Ref("_v1")), 14.0),
    (Mul(Ref("_v1"), Lit(3.0)), -12.0),
    (Div(Ref("_v0"), Ref("_v2")), None),          # division by (noisy) zero: NULL, no error
    (Neg(Ref("_v1")), 4.0),
    (Cmp(">", Ref("_v0"), Lit(5.0)), True),
    (And(Cmp(">", Ref("_v0"), Lit(5.0)), Lit(None)), None),
    (Or(Lit(None), Lit(True)), True),
    (Not(Cmp("=", Key(0), Lit("CA"))), False),
    (IsNull(Lit(None), False), True),
    (Cmp("<", Key(0), Lit(3.0)), None),            # incomparable types: NULL, no error
])
def test_evaluate(expr, value):
    assert expr.evaluate(ENV, ("CA",)) == value


def test_avg_is_clamped_and_safe_with_tiny_counts():
    env = {"s": 5000.0, "c": 0.6}
    assert Avg("s", "c", 0.0, 100.0).evaluate(env, ()) == 100.0   # clamped to the upper bound
    env = {"s": 5000.0, "c": 0.2}       # the noisy count rounds to no row: NULL, as AVG of no rows
    assert Avg("s", "c", 0.0, 100.0).evaluate(env, ()) is None
    assert Var("s", "s", "c", 0.0, 100.0, False, False).evaluate(env, ()) is None
    env = {"s": 5000.0, "c": 1.2}       # a sample variance of one row is NULL too
    assert Var("s", "s", "c", 0.0, 100.0, True, True).evaluate(env, ()) is None
    assert Var("s", "s", "c", 0.0, 100.0, False, True).evaluate(env, ()) is not None
    env = {"s": -10.0, "c": 10.0}
    assert Avg("s", "c", 0.0, 100.0).evaluate(env, ()) == pytest.approx(49.0)


def test_half_width_by_interval_arithmetic():
    assert half_width(Ref("_v0"), ENV, W, ()) == 1.0
    assert half_width(Add(Ref("_v0"), Ref("_v1")), ENV, W, ()) == 3.0
    assert half_width(Mul(Ref("_v0"), Lit(2.0)), ENV, W, ()) == 2.0
    assert half_width(Div(Ref("_v0"), Ref("_v2")), ENV, W, ()) is None   # 0 in the denominator
    w = half_width(Avg("_v0", "_v2", 0.0, 10.0), {"_v0": 10.0, "_v2": 100.0}, {"_v0": 5.0, "_v2": 10.0}, ())
    assert 0 < w < 1


def test_finish_having_order_limit_offset():
    rows = [(("a",), {"_v0": 5.0}, {"_v0": 1.0}), (("b",), {"_v0": 50.0}, {"_v0": 1.0}),
            (("c",), {"_v0": 20.0}, {"_v0": 1.0}), (("d",), {"_v0": 1.0}, {"_v0": 1.0})]
    outputs = [("k", Key(0), False), ("n", Ref("_v0"), True)]
    having = Cmp(">", Ref("_v0"), Lit(2.0))
    t = finish(rows, outputs, having, [(Ref("_v0"), True, True)], limit=2, offset=1)
    assert t.columns == ["k", "n"]
    assert t.rows == [("c", 20.0), ("a", 5.0)]
    assert t.widths == [(None, 1.0), (None, 1.0)]


def test_order_nulls_placement():
    rows = [((k,), {"_v0": v}, {"_v0": 0.0}) for k, v in [("a", 1.0), ("b", 0.0), ("c", 3.0)]]
    outputs = [("k", Key(0), False), ("q", Div(Lit(1.0), Ref("_v0")), True)]
    order_expr = Div(Lit(1.0), Ref("_v0"))
    asc_last = finish(rows, outputs, None, [(order_expr, False, False)], None, 0)
    assert [r[0] for r in asc_last.rows] == ["c", "a", "b"]
    desc_first = finish(rows, outputs, None, [(order_expr, True, True)], None, 0)
    assert [r[0] for r in desc_first.rows] == ["b", "a", "c"]


def test_noise_draws_are_kept_read_only_and_the_same_as_drawn_afresh():
    """The simulation's draws are a function of the measures' mechanisms and scales only: kept
    between queries, they must equal a fresh draw with the public seed, and no caller may change
    them (a changed array would change every later query's widths)."""
    import numpy as np

    from dpsql.postprocess import SIM_SEED, noise_draws
    noise = {"_v1": ("gaussian", 3.0), "_v0": ("laplace", 2.0)}
    first, again = noise_draws(noise, 500), noise_draws(dict(reversed(noise.items())), 500)
    rng = np.random.default_rng(SIM_SEED)          # drawn in the measures' sorted order
    fresh = {"_v0": rng.laplace(0.0, 2.0, 500), "_v1": rng.normal(0.0, 3.0, 500)}
    for name in noise:
        assert np.array_equal(first[name], fresh[name]) and np.array_equal(again[name], fresh[name])
        with pytest.raises(ValueError):
            first[name][0] = 0.0
    assert not np.array_equal(noise_draws({"_v0": ("laplace", 4.0)}, 500)["_v0"], first["_v0"])


def test_finish_simulates_derived_values_only():
    """A plain noisy measure's width is its mechanism's (W); a derived one (a difference of two
    noisy measures) is simulated from the mechanisms' draws, so it differs from the interval sum
    (which over-covers) and is bounded by it."""
    noise = {"_v0": ("laplace", 1.0), "_v1": ("laplace", 2.0)}
    widths = {"_v0": 3.0, "_v1": 6.0}                 # about each Laplace's 95% half-width
    rows = [((), {"_v0": 10.0, "_v1": 4.0}, widths)]
    plain = finish(rows, [("a", Ref("_v0"), True)], None, [], None, 0, noise)
    assert plain.widths == [(3.0,)]
    derived = finish(rows, [("d", Sub(Ref("_v0"), Ref("_v1")), True)], None, [], None, 0, noise)
    (w,), = derived.widths
    assert 0 < w < 9.0 and w != pytest.approx(9.0, abs=0.05)


@pytest.mark.parametrize("undefined", [0.0, 0.03, 0.049, 0.051, 0.2])
def test_simulated_widths_count_undefined_draws_as_infinitely_far(undefined):
    """The simulated 95% half-width is the 'higher' 95% quantile of the distances, a draw where the
    expression is undefined (NaN) counting as +inf: finite when at most 5% are, else None. Checked
    against numpy's quantile on every row of a result larger than one simulation batch."""
    import numpy as np

    from dpsql.postprocess import simulated_half_widths
    rng = np.random.default_rng(11)
    n = 4000
    z = rng.laplace(0.0, 3.0, n)
    z[rng.choice(n, int(undefined * n), replace=False)] = np.nan
    z[rng.choice(n, 5, replace=False)] = np.inf     # infinitely far too, and ordered before NaN
    rows = 70
    envs = [{"s": float(v)} for v in rng.normal(0, 100, rows)]
    got = simulated_half_widths(Neg(Ref("s")), envs, {"s": z}, [()] * rows)
    want = []
    for env in envs:
        with np.errstate(invalid="ignore"):
            d = np.abs(-(env["s"] + z) - (-env["s"]))
        w = float(np.quantile(np.where(np.isnan(d), np.inf, d), 0.95, method="higher"))
        want.append(w if np.isfinite(w) else None)
    assert got == want
    far = int(undefined * n) + 5                    # draws at +inf or undefined
    assert all((w is None) == (far > n - 1 - math.ceil(0.95 * (n - 1))) for w in got)


def test_numpy_partition_orders_nan_after_inf():
    """The premise of the simulation's NaN handling (dpsql.postprocess.simulate._simulate)."""
    import numpy as np
    a = np.array([[np.nan, 1.0, np.inf, -np.inf, np.nan, 0.5]] * 3)
    a.partition(3, axis=1)
    assert np.isinf(a[:, 3]).all() and (a[:, 3] > 0).all() and np.isnan(a[:, 4:]).all()
