"""Sample-and-aggregate (dpsql.analysis.sample_aggregate): neighbouring datasets and accuracy.

* Sensitivity, before noise: D has 3,000 people with correlated x, y in several groups; D' is D
  with one more person X holding 40 rows of extreme values (beyond the bounds, NaN, infinities,
  NULLs, constant runs) spread over every group. For several salts, the rewritten SQL run on
  each engine (the engine's exact per-group centered sums, as the Session receives them) gives
  block means on D and D' that differ, over all groups, by at most the plan's L1 sensitivity
  (and per group by its Linf = (hi - lo) / k); X touches at most L0 groups.
* Accuracy: the released CORR (epsilon 1, k = 16) against the exact CORR of 4,000 people.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

from dpsql.analysis.measures import Count, SampleAggregate
from dpsql.noise.rng import SeededRng
from dpsql.rewrite import to_sql
from dpsql.session import Session

FUNCS = {"corr": "CORR(x, y)", "covar_pop": "COVAR_POP(x, y)", "covar_samp": "COVAR_SAMP(x, y)",
         "regr_slope": "REGR_SLOPE(y, x)", "regr_intercept": "REGR_INTERCEPT(y, x)"}
GROUPS = ("a", "b", "c")


def _policy(tmp_path, blocks: int = 8) -> dict:
    return {
        "budget": {"epsilon": 1e9, "delta": 1e-3, "ledger": str(tmp_path / "ledger.sqlite"), "accountant": "basic"},
        "defaults": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},
        "timing": {"quantum": 0, "floor": 0},
        "reconstruction": {"cache_lifetime": 0},
        "functions": {"sample_aggregate": list(FUNCS), "blocks": blocks,
                      "regr_slope": {"lower": -5, "upper": 5}, "regr_intercept": {"lower": -100, "upper": 200}},
        "tables": {"pts": {"privacy_unit": "pid", "max_rows_per_unit": 5, "max_groups_per_unit": 2,
                           "columns": {"x": {"lower": 0, "upper": 100}, "y": {"lower": 0, "upper": 100},
                                       "g": {"values": list(GROUPS)}}}},
    }


def _rows(n: int, seed: int, rho: float = 0.6) -> list[tuple]:
    r = random.Random(seed)
    out = []
    for pid in range(1, n + 1):
        g = GROUPS[pid % 3]
        for _ in range(r.randint(1, 3)):
            a, b = r.gauss(0, 1), r.gauss(0, 1)
            x = 50 + 12 * a
            y = 50 + 12 * (rho * a + math.sqrt(1 - rho * rho) * b)
            out.append((pid, g, x, y))
    return out


def _extreme() -> list[tuple]:
    vals = [1e9, -1e9, float("nan"), float("inf"), float("-inf"), None, 100.0, 0.0, 55.0, 55.0]
    rows = []
    for i in range(40):
        rows.append((0, GROUPS[i % 3], vals[i % len(vals)], vals[(3 * i + 1) % len(vals)]))
    return rows


def _text(v) -> str:
    return "" if v is None else repr(float(v))


def _db(path, rows) -> str:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE pts (pid BIGINT, g VARCHAR, x DOUBLE, y DOUBLE)")
    csv = Path(str(path) + ".csv")      # one COPY: executemany inserts row by row
    csv.write_text("".join(f"{p},{g},{_text(x)},{_text(y)}\n" for p, g, x, y in rows))
    con.execute(f"COPY pts FROM '{csv}' (HEADER false, NULLSTR '')")
    con.close()
    return str(path)


def _targets(tmp_path, request, name, rows):
    db = _db(tmp_path / f"{name}.duckdb", rows)
    if request.param == "duckdb":
        yield db
        return
    from tests.conftest import copy_to_postgres, postgres_database
    server = request.getfixturevalue("postgres_server")
    with postgres_database(server, f"dpsql_sa_{name}") as url:
        copy_to_postgres(db, url)
        yield url


@pytest.fixture(params=["duckdb", "postgres"])
def pair(tmp_path, request):
    base = _rows(3000, 1)
    d = _targets(tmp_path, request, "d", base)
    d2 = _targets(tmp_path, request, "d2", base + _extreme())
    yield next(d), next(d2)
    for gen in (d, d2):
        next(gen, None)


def _means(session: Session, sql: str, salt: int) -> tuple[dict, object]:
    plan = session.plan(sql, cached=False)
    text = to_sql(plan, session.engine.dialect)
    rows = session.engine.run(text, {"salt": salt}).rows
    m = plan.measures[0]
    mid = (m.lo + m.hi) / 2
    nk = len(plan.keys)
    out = {tuple(r[:nk]): mid + Fraction(r[nk] or 0) / m.divisor for r in rows}
    for g in ([(v,) for v in GROUPS] if nk else [()]):
        out.setdefault(g, mid)      # what the Session releases for a public group the engine did not return
    return out, plan


@pytest.mark.parametrize("fname", list(FUNCS))
@pytest.mark.parametrize("grouped", [False, True])
def test_one_unit_moves_the_block_mean_by_at_most_the_sensitivity(tmp_path, pair, fname, grouped):
    d, d2 = pair
    pol = _policy(tmp_path)
    sql = f"SELECT {'g, ' if grouped else ''}{FUNCS[fname]} FROM pts" + (" GROUP BY g" if grouped else "")
    s1, s2 = Session.open(d, pol, "a"), Session.open(d2, pol, "a")
    try:
        worst = 0.0
        for salt in (1, 2**40 + 7, 2**62 - 3, 123456789):
            a, plan = _means(s1, sql, salt)
            b, _ = _means(s2, sql, salt)
            spec, m = plan.noise[0], plan.measures[0]
            linf = (m.hi - m.lo) / m.sample.blocks
            assert Fraction(spec.linf) >= linf * (1 - Fraction(1, 10**12))
            diffs = [abs(b[g] - a[g]) for g in a]
            assert all(x <= linf for x in diffs), (fname, salt, diffs, linf)
            assert sum(1 for x in diffs if x > 0) <= plan.l0
            assert sum(diffs) <= Fraction(spec.l1) * (1 + Fraction(1, 10**12))
            assert all(m.lo <= v <= m.hi for v in list(a.values()) + list(b.values()))
            worst = max(worst, float(max(diffs)) / float(linf))
        assert worst > 0.0       # X's rows did reach a block
    finally:
        s1.close()
        s2.close()


def test_corr_accuracy_against_the_exact_answer(tmp_path):
    rows = _rows(4000, 2)
    db = _db(tmp_path / "acc.duckdb", rows)
    con = duckdb.connect(db, read_only=True)
    exact = con.execute("SELECT CORR(x, y) FROM pts").fetchone()[0]
    con.close()
    pol = _policy(tmp_path, blocks=16)
    s = Session.open(db, pol, "a", rng=SeededRng(5))
    try:
        s.execute("SET dpsql.epsilon = 1")
        errs = []
        for _ in range(20):
            r = s.execute("SELECT CORR(x, y) FROM pts")
            errs.append(abs(r.rows[0][0] - exact))
            assert -1 <= r.rows[0][0] <= 1
        errs.sort()
        median = errs[len(errs) // 2]
        # noise: Laplace of scale 2 / (16 * 1) = 0.125 (median |noise| 0.087); blocks of 250 people
        assert median < 0.25, (exact, errs)
    finally:
        s.close()


# -- beside other aggregates (dpsql.rewrite.sample_aggregate.combined)

MIXED = {
    "grouped": "SELECT g, COUNT(*), AVG(x), CORR(x, y), SUM(y), COVAR_SAMP(x, y) FROM pts GROUP BY g",
    "filtered": "SELECT g, SUM(x) FILTER (WHERE y > 40), REGR_SLOPE(y, x) FILTER (WHERE y > 40), COUNT(*) "
                "FROM pts WHERE x < 90 GROUP BY g",
    "ungrouped": "SELECT COUNT(*), CORR(x, y), VARIANCE(y), REGR_INTERCEPT(y, x) FROM pts",
}


def _all_values(session: Session, sql: str, salt: int) -> tuple[dict, object]:
    """Every measure's exact value per group in released units (the engine's integer / divisor), as
    the Session receives them; a public group the engine did not return, or a NULL, is 0."""
    plan = session.plan(sql, cached=False)
    rows = session.engine.run(to_sql(plan, session.engine.dialect), {"salt": salt}).rows
    nk = len(plan.keys)
    groups = [(v,) for v in GROUPS] if nk else [()]
    got = {tuple(r[:nk]): r[nk:] for r in rows}
    out = {m.name: {g: Fraction(got.get(g, (0,) * len(plan.measures))[i] or 0) / m.divisor for g in groups}
           for i, m in enumerate(plan.measures)}
    return out, plan


@pytest.mark.parametrize("case", list(MIXED))
def test_mixed_query_each_measure_within_its_sensitivity(tmp_path, pair, case):
    """The mixed query's rewrite on D and D' (one more unit X, 40 extreme rows over every group):
    each measure, ordinary or sample-and-aggregate, moves by at most its own Linf per group and its
    L1 over all groups, in at most L0 groups; over all measures X moves at most L0 groups (the two
    parts choose the same groups for a unit); block means stay in their ranges."""
    d, d2 = pair
    pol = _policy(tmp_path)
    sql = MIXED[case]
    s1, s2 = Session.open(d, pol, "a"), Session.open(d2, pol, "a")
    try:
        moved = set()
        for salt in (1, 2**40 + 7, 2**62 - 3, 123456789):
            a, plan = _all_values(s1, sql, salt)
            b, _ = _all_values(s2, sql, salt)
            assert {type(m) for m in plan.measures} >= {SampleAggregate, Count}
            specs = {s.target: s for s in plan.noise}
            touched = set()
            for m in plan.measures:
                spec = specs[m.name]
                diffs = {g: abs(b[m.name][g] - a[m.name][g]) for g in a[m.name]}
                tol = 1 + Fraction(1, 10**12)
                assert all(x <= Fraction(spec.linf) * tol for x in diffs.values()), (m.label, salt, diffs)
                assert sum(diffs.values()) <= Fraction(spec.l1) * tol, (m.label, salt, diffs)
                touched |= {g for g, x in diffs.items() if x > 0}
                if isinstance(m, SampleAggregate):
                    mid = (m.lo + m.hi) / 2
                    assert all(m.lo <= mid + v <= m.hi for v in list(a[m.name].values()) + list(b[m.name].values()))
                    moved |= {m.name for x in diffs.values() if x > 0}
            assert len(touched) <= plan.l0, (salt, touched)
        assert any(isinstance(m, SampleAggregate) and m.name in moved for m in plan.measures)   # X reached a block
    finally:
        s1.close()
        s2.close()


def test_mixed_release_accuracy(tmp_path):
    """The released COUNT and CORR of one mixed query (epsilon 2: 1 each, k = 16), seeded, against the
    exact answers: the count within 10 Laplace scales every time, the median CORR error small."""
    rows = _rows(4000, 3)
    db = _db(tmp_path / "mix.duckdb", rows)
    con = duckdb.connect(db, read_only=True)
    exact_corr, = con.execute("SELECT CORR(x, y) FROM pts").fetchone()
    bounded_count, = con.execute("SELECT SUM(LEAST(n, 5)) FROM (SELECT COUNT(*) AS n FROM pts GROUP BY pid)").fetchone()
    con.close()
    s = Session.open(db, _policy(tmp_path, blocks=16), "a", rng=SeededRng(11))
    try:
        s.execute("SET dpsql.epsilon = 2")
        errs = []
        for _ in range(20):
            r = s.execute("SELECT COUNT(*) AS n, CORR(x, y) AS c FROM pts")
            (n, c), = r.rows
            assert abs(n - bounded_count) <= 10 * 5 and -1 <= c <= 1     # Laplace scale 5 / 1
            errs.append(abs(c - exact_corr))
        errs.sort()
        assert errs[len(errs) // 2] < 0.25, (exact_corr, errs)
    finally:
        s.close()
