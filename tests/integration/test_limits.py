"""Per-query floors and caps of the policy: min_epsilon, release timing, released rows, cached bytes."""
from __future__ import annotations

import time

import duckdb
import pytest

import dpsql
from dpsql.errors import InvalidSetting, QueryRejected
from dpsql.policy import load_policy
from dpsql.release import release_delay
from tests.conftest import policy_for


def _conn(people_db, tmp_path, **over):
    pol = policy_for(tmp_path)
    pol.update(over)
    return dpsql.connect(people_db, policy=pol, analyst="ann")


def test_min_epsilon_default_and_refusal(people_db, tmp_path):
    conn = _conn(people_db, tmp_path)
    assert conn.session.policy.defaults.min_epsilon == 0.01
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.01")
    for bad in ("0.0099", "1e-9", "5e-324"):
        with pytest.raises(InvalidSetting, match="below the policy's minimum 0.01"):
            cur.execute(f"SET dpsql.epsilon = {bad}")
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchall()[0][0] == 0.01         # the refused SETs changed nothing


def test_min_epsilon_policy_validation(tmp_path):
    pol = policy_for(tmp_path)
    pol["defaults"]["min_epsilon"] = 0.001
    assert load_policy(pol).defaults.min_epsilon == 0.001
    pol["defaults"]["min_epsilon"] = 5.0
    with pytest.raises(dpsql.PolicyError, match="min_epsilon"):
        load_policy(pol)


@pytest.mark.parametrize("quantum, floor, work, expect", [
    (0.05, 0.1, 0.0, 0.1),       # fast queries are released at the floor
    (0.05, 0.1, 0.03, 0.1),
    (0.05, 0.1, 0.12, 0.15),     # slower ones at the next multiple of the quantum
    (0.05, 0.0, 0.07, 0.1),
    (0.0, 0.08, 0.01, 0.08),
])
@pytest.mark.alone          # a 40 ms window: in a parallel run, not beside another worker's test
def test_release_delay_is_quantised(quantum, floor, work, expect):
    class T:
        pass
    t = T()
    t.quantum, t.floor = quantum, floor
    start = time.monotonic()
    time.sleep(work)
    release_delay(start, t)
    took = time.monotonic() - start
    assert expect <= took < expect + 0.04, took


def test_private_answers_wait_for_the_floor(people_db, tmp_path):
    conn = _conn(people_db, tmp_path, timing={"quantum": 0.05, "floor": 0.3})
    cur = conn.cursor()
    for q in ("SELECT COUNT(*) FROM people WHERE age > 1", "SELECT state, COUNT(*) FROM people GROUP BY state"):
        t0 = time.monotonic()
        cur.execute(q)
        assert time.monotonic() - t0 >= 0.3
    with pytest.raises(QueryRejected):         # refusals depend on the text only: not delayed
        cur.execute("SELECT * FROM people")


def test_public_domains_beyond_max_released_rows_refused_before_charge(tmp_path):
    path = str(tmp_path / "wide.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE t AS SELECT i AS pid, i % 300 AS a, i % 400 AS b FROM range(2000) r(i)")
    con.close()
    pol = {"budget": {"epsilon": 10.0, "delta": 1e-6, "ledger": str(tmp_path / "l.sqlite")},
           "defaults": {"epsilon": 0.1}, "timing": {"quantum": 0, "floor": 0},
           "limits": {"max_released_rows": 1000},
           "tables": {"t": {"privacy_unit": "pid", "max_groups_per_unit": 2, "columns": {
               "a": {"values": list(range(300))}, "b": {"values": list(range(400))}}}}}
    cur = dpsql.connect(path, policy=pol, analyst="ann").cursor()
    with pytest.raises(QueryRejected, match="max_released_rows"):
        cur.execute("SELECT a, b, COUNT(*) FROM t GROUP BY a, b")
    cur.execute("SHOW dpsql.budget")
    assert cur.fetchall()[0][1] == 0.0
    cur.execute("SELECT a, b, COUNT(*) FROM t GROUP BY a, b LIMIT 1000")
    assert len(cur.fetchall()) == 1000
    cur.execute("SELECT a, COUNT(*) FROM t GROUP BY a")
    assert len(cur.fetchall()) == 300


def test_selected_groups_beyond_the_limit_are_cut_and_said(tmp_path):
    path = str(tmp_path / "sel.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE t AS SELECT i AS pid, i % 50 AS g FROM range(20000) r(i)")
    con.close()
    pol = {"budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": str(tmp_path / "l.sqlite")},
           "defaults": {"epsilon": 1.0, "delta": 1e-4}, "timing": {"quantum": 0, "floor": 0},
           "limits": {"max_released_rows": 20},
           "tables": {"t": {"privacy_unit": "pid", "columns": {"g": {}}}}}
    conn = dpsql.connect(path, policy=pol, analyst="ann")
    r = conn.session.execute("SELECT g, COUNT(*) FROM t GROUP BY g")
    assert len(r.rows) == 20 and r.truncated == 30         # 400 people per group: all 50 pass selection
    assert [row[0] for row in r.rows] == list(range(20))    # cut in key order
    assert "30 more released groups were cut" in r.status


def test_selected_groups_are_cut_before_their_values_are_drawn_only_when_nothing_reorders_them(tmp_path):
    """Without HAVING, ORDER BY, OFFSET or an outer query the first max_released_rows selected groups
    (in key order) are the released ones: the rest are cut before their values are drawn, and the
    count of cut ones is what it would be after; with ORDER BY every selected group is released
    first and the best ones kept."""
    path = str(tmp_path / "sel.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE t AS SELECT i AS pid, i % 50 AS g FROM range(20000) r(i)")
    con.close()
    pol = {"budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": str(tmp_path / "l.sqlite")},
           "defaults": {"epsilon": 1.0, "delta": 1e-4}, "timing": {"quantum": 0, "floor": 0},
           "reconstruction": {"cache_lifetime": 0}, "limits": {"max_released_rows": 20},
           "tables": {"t": {"privacy_unit": "pid", "columns": {"g": {}}}}}
    s = dpsql.connect(path, policy=pol, analyst="ann").session
    r = s.execute("SELECT g, COUNT(*) FROM t GROUP BY g LIMIT 25")
    assert [row[0] for row in r.rows] == list(range(20)) and r.truncated == 5
    r = s.execute("SELECT g, COUNT(*) FROM t GROUP BY g LIMIT 10")
    assert [row[0] for row in r.rows] == list(range(10)) and r.truncated == 0
    r = s.execute("SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY g DESC")
    assert [row[0] for row in r.rows] == list(range(49, 29, -1)) and r.truncated == 30


def test_work_limits_refuse_before_the_charge(people_db, tmp_path):
    """[limits] max_released_cells and max_quantile_work: the refusal names the limit and the numbers,
    and nothing is charged."""
    conn = _conn(people_db, tmp_path, limits={"max_released_cells": 30, "max_quantile_work": 16})
    cur = conn.cursor()
    with pytest.raises(QueryRejected, match=r"8 groups \(the product of its keys' public domains\) x 4 noisy "
                                            r"values = 32 cells, more than the 30 .*max_released_cells"):
        cur.execute("SELECT state, COUNT(*), SUM(income), SUM(age), MEDIAN(age) FROM people GROUP BY state")
    with pytest.raises(QueryRejected, match=r"8 groups .* x 3 quantiles = 24 quantile choices, more than the 16 "
                                            r".*max_quantile_work"):
        cur.execute("SELECT state, MIN(age), MEDIAN(age), MAX(age) FROM people GROUP BY state")
    with pytest.raises(QueryRejected, match=r"100000 groups \(max_released_rows: a key has no public domain\) "
                                            r"x 1 noisy values = 100000 cells"):
        cur.execute("SELECT income, COUNT(*) FROM people GROUP BY income")
    assert conn.session.spending().epsilon_spent == 0.0
    cur.execute("SELECT state, MEDIAN(age), MAX(age) FROM people GROUP BY state")     # 16 of each: fits
    assert len(cur.fetchall()) == 8


def test_answer_cache_is_capped_per_analyst(people_db, tmp_path):
    conn = _conn(people_db, tmp_path, limits={"max_cached_bytes": 3000})
    s = conn.session
    for i in range(12):
        s.execute(f"SELECT state, COUNT(*) FROM people WHERE age > {i} GROUP BY state")
    with s.ledger._use() as db:
        total, n = db.execute("SELECT SUM(length(CAST(payload AS BLOB))), COUNT(*) FROM answers "
                              "WHERE analyst = 'ann'").fetchone()
    assert 0 < total <= 3000 and 0 < n < 12
    # the newest answer is kept, so its repeat is free
    r = s.execute("SELECT state, COUNT(*) FROM people WHERE age > 11 GROUP BY state")
    assert r.cached


def test_answer_larger_than_the_cache_is_not_kept(people_db, tmp_path):
    conn = _conn(people_db, tmp_path, limits={"max_cached_bytes": 10})
    s = conn.session
    s.execute("SELECT COUNT(*) FROM people WHERE age > 3")
    r = s.execute("SELECT COUNT(*) FROM people WHERE age > 3")
    assert not r.cached and r.cost.epsilon > 0
