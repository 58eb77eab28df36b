"""Automatic clipping bounds answered on DuckDB, PostgreSQL and Spark (dpsql.analysis.auto_bounds):
income declared `bounds = "auto"` in [0, 1e9]. At a huge epsilon the bound chosen is about the
largest income, so SUM and AVG are near the unclipped truth, with a half-width far below what
the hard range would give; EXPLAIN DP shows the split."""
from __future__ import annotations

import pytest

from tests.integration.test_joins import _truth


@pytest.fixture
def auto_connect(tmp_path):
    import dpsql
    from tests.conftest import policy_for
    opened = []

    def open_(target, eps):
        pol = policy_for(tmp_path, epsilon=1e9)
        pol["reconstruction"] = {"cache_lifetime": 0}
        pol["tables"]["people"]["columns"]["income"] = {"lower": 0, "upper": 1e9, "bounds": "auto"}
        c = dpsql.connect(target, policy=pol, analyst="a")
        c.cursor().execute(f"SET dpsql.epsilon = {eps}")
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


def test_auto_bound_sum_and_avg_near_the_truth(target, people_db, auto_connect):
    cur = auto_connect(target, 20000).cursor()
    cur.execute("SELECT SUM(income) AS s FROM people WHERE age >= 18")
    (s,), (hs,) = cur.fetchone(), cur.half_widths[0]
    (ts,), = _truth(people_db, "SELECT SUM(income) FROM people WHERE age >= 18")
    assert abs(s - ts) <= 0.01 * ts + 10 * hs, (s, ts, hs)
    assert hs < 1e9 / 20000          # far below the hard range's half-width
    cur.execute("SELECT AVG(income) AS a FROM people")
    (a,), = cur.fetchall()
    (ta,), = _truth(people_db, "SELECT AVG(income) FROM people")
    assert abs(a - ta) <= 0.01 * ta


def test_auto_bound_at_epsilon_one_beats_the_hard_range(target, people_db, auto_connect):
    cur = auto_connect(target, 1.0).cursor()
    cur.execute("SELECT SUM(income) AS s FROM people")
    (s,), (hs,) = cur.fetchone(), cur.half_widths[0]
    (ts,), = _truth(people_db, "SELECT SUM(income) FROM people")
    assert hs < 1e9 * 0.01           # the hard range alone: about 3e9
    assert abs(s - ts) <= 0.5 * ts, (s, ts, hs)


def test_explain_shows_the_split(target, auto_connect):
    cur = auto_connect(target, 1.0).cursor()
    cur.execute("EXPLAIN DP (WIDE) SELECT SUM(income) FROM people")
    rows = cur.fetchall()
    auto = next(r for r in rows if r[0] == "auto_bound")
    value = next(r for r in rows if r[0] == "value")
    assert auto[4] == pytest.approx(0.1) and value[4] == pytest.approx(0.9)
    assert "AboveThreshold" in auto[8]
