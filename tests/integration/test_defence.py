"""The reconstruction defence through the whole pipeline, on every engine: surcharge, cap, answer
cache, audit log and what EXPLAIN DP says about them."""
from __future__ import annotations

import datetime as dt
import json
import time
from decimal import Decimal
from pathlib import Path

import pytest

import dpsql
from dpsql.ledger.answer_cache import decode, encode
from dpsql.noise.rng import SeededRng
from tests.conftest import policy_for

SUBSET = "SELECT COUNT(*) FROM people WHERE person_id IN (1, 2, 3)"
PLAIN = "SELECT COUNT(*) FROM people WHERE age > 40"


def connect(target, pol, analyst="alice", seed=1):
    return dpsql.connect(target, policy=pol, analyst=analyst, rng=SeededRng(seed))


def audit(pol) -> list[dict]:
    path = Path(pol["budget"]["ledger"])
    path = path.with_name(path.stem + ".audit.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_subset_query_is_charged_with_the_surcharge(target, tmp_path):
    pol = policy_for(tmp_path, reconstruction={"surcharge": 0.5})
    with connect(target, pol) as conn:
        cur = conn.cursor()
        eps = cur.execute("SHOW dpsql.epsilon").fetchone()[0]
        cur.execute(SUBSET)
        assert cur.cost.epsilon == pytest.approx(1.5 * eps)
        assert "surcharge" in cur.statusmessage
        cur.execute(PLAIN)
        assert cur.cost.epsilon == pytest.approx(eps) and "surcharge" not in cur.statusmessage
        assert cur.execute("SHOW dpsql.budget").fetchone()[1] == pytest.approx(2.5 * eps)
    (record,) = audit(pol)
    assert record["event"] == "subset_charged" and record["analyst"] == "alice"
    assert record["query"].startswith("SELECT COUNT(*) FROM people WHERE person_id IN (1, 2, 3)")
    assert record["classification"]["kinds"] == ["in_list"] and record["classification"]["selected"] == 3
    assert record["epsilon"] == pytest.approx(1.5 * eps) and record["surcharge"] == pytest.approx(0.5 * eps)
    assert record["population"] == "people | COUNT(*) | all rows" and record["answered"] == 1
    assert dt.datetime.fromisoformat(record["time"]).tzinfo is not None


def test_the_cap_refuses_with_a_reason_and_charges_nothing(target, tmp_path):
    pol = policy_for(tmp_path, reconstruction={"max_subset_queries": 2})
    with connect(target, pol) as conn:
        cur = conn.cursor()
        cur.execute("SELECT SUM(income) FROM people WHERE person_id = 1 AND age > 30")
        cur.execute("SELECT SUM(income) FROM people WHERE age > 30 AND person_id IN (2, 3)")
        spent = cur.execute("SHOW dpsql.budget").fetchone()[1]
        with pytest.raises(dpsql.QueryRejected) as info:
            cur.execute("SELECT SUM(income) FROM people WHERE (person_id = 4 OR person_id = 5) AND age > 30")
        msg = str(info.value)
        assert "same population" in msg and "allows 2" in msg and "max_subset_queries" in msg
        assert cur.execute("SHOW dpsql.budget").fetchone()[1] == spent
        # another population (another filter, another aggregate) is another series
        cur.execute("SELECT SUM(income) FROM people WHERE person_id = 4 AND age > 50")
        cur.execute("SELECT COUNT(*) FROM people WHERE person_id = 4 AND age > 30")
    events = [r["event"] for r in audit(pol)]
    assert events == ["subset_charged", "subset_charged", "subset_refused", "subset_charged", "subset_charged"]
    assert audit(pol)[2]["reason"] == "42501"


def test_the_cap_is_kept_across_connections(target, tmp_path):
    pol = policy_for(tmp_path, reconstruction={"max_subset_queries": 1})
    with connect(target, pol) as conn:
        conn.cursor().execute(SUBSET)
    with connect(target, pol) as conn, pytest.raises(dpsql.QueryRejected):
        conn.cursor().execute("SELECT COUNT(*) FROM people WHERE person_id IN (4, 5)")
    with connect(target, pol, analyst="bob") as conn:          # per analyst
        conn.cursor().execute("SELECT COUNT(*) FROM people WHERE person_id IN (4, 5)")


def test_an_identical_repeat_gets_the_same_answer_free(target, tmp_path):
    pol = policy_for(tmp_path)
    query = "SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY state"
    with connect(target, pol, seed=1) as conn:
        cur = conn.cursor()
        first = cur.execute(query).fetchall()
        first_meta = (cur.description, cur.accuracy, cur.half_widths)
        spent = cur.execute("SHOW dpsql.budget").fetchone()[1]
        again = cur.execute("select state, count(*) as n,  avg(income) as avg_income\n from people group by state")
        assert again.fetchall() == first and cur.cached and cur.cost.epsilon == 0
        assert (cur.description, cur.accuracy, cur.half_widths) == first_meta
        assert "nothing charged" in cur.statusmessage
        assert cur.execute("SHOW dpsql.budget").fetchone()[1] == spent
        # a different epsilon is a different release: charged, fresh noise
        cur.execute("SET dpsql.epsilon = 0.25")
        other = cur.execute(query).fetchall()
        assert not cur.cached and cur.cost.epsilon == pytest.approx(0.25) and other != first
    with connect(target, pol, seed=2) as conn:            # persistent, per analyst
        cur = conn.cursor()
        assert cur.execute(query).fetchall() == first and cur.cached
    with connect(target, pol, analyst="bob", seed=3) as conn:
        cur = conn.cursor()
        assert cur.execute(query).fetchall() != first and not cur.cached


def test_parameters_are_part_of_the_repeat(target, tmp_path):
    pol = policy_for(tmp_path)
    with connect(target, pol) as conn:
        cur = conn.cursor()
        a = cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", [30]).fetchone()
        assert cur.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchone() == a and cur.cached
        cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", [31])
        assert not cur.cached


def test_repeats_of_a_subset_query_are_free_even_past_the_cap(target, tmp_path):
    pol = policy_for(tmp_path, reconstruction={"max_subset_queries": 1})
    with connect(target, pol) as conn:
        cur = conn.cursor()
        a = cur.execute(SUBSET).fetchone()
        for _ in range(3):
            assert cur.execute(SUBSET).fetchone() == a and cur.cached
    assert [r["event"] for r in audit(pol)] == ["subset_charged"] + ["subset_repeat"] * 3


def test_a_zero_lifetime_turns_the_cache_off_and_a_short_one_expires(target, tmp_path):
    with connect(target, policy_for(tmp_path, reconstruction={"cache_lifetime": 0})) as conn:
        cur = conn.cursor()
        a = cur.execute(PLAIN).fetchone()
        assert cur.execute(PLAIN).fetchone() != a and not cur.cached
    with connect(target, policy_for(tmp_path / "short", reconstruction={"cache_lifetime": 0.5})) as conn:
        cur = conn.cursor()
        a = cur.execute(PLAIN).fetchone()
        time.sleep(0.6)
        assert cur.execute(PLAIN).fetchone() != a and not cur.cached


def test_a_flagged_query_refused_for_budget_is_audited(target, tmp_path):
    pol = policy_for(tmp_path, epsilon=0.5)
    with connect(target, pol) as conn, pytest.raises(dpsql.BudgetExhausted):
        conn.cursor().execute(SUBSET)          # 0.5 + surcharge 0.5 > 0.5
    (record,) = audit(pol)
    assert record["event"] == "subset_refused" and record["reason"] == "53000"


def test_explain_dp_shows_the_surcharge_the_series_and_the_cache(target, tmp_path):
    pol = policy_for(tmp_path, reconstruction={"max_subset_queries": 3})
    with connect(target, pol) as conn:
        cur = conn.cursor()
        eps = cur.execute("SHOW dpsql.epsilon").fetchone()[0]
        rows = {r[0]: r for r in cur.execute("EXPLAIN DP (WIDE) " + SUBSET).fetchall()}
        assert rows["surcharge"][4] == pytest.approx(eps) and rows["charge"][4] == pytest.approx(2 * eps)
        assert rows["subset_series"][1] == "0 of 3 answered" and "cache" not in rows
        cur.execute(SUBSET)
        rows = {r[0]: r for r in cur.execute("EXPLAIN DP (WIDE) " + SUBSET).fetchall()}
        assert rows["subset_series"][1] == "1 of 3 answered" and rows["cache"][4] == 0.0
        rows = {r[0]: r for r in cur.execute("EXPLAIN DP (WIDE) " + PLAIN).fetchall()}
        assert "surcharge" not in rows and "subset_series" not in rows
        assert rows["charge"][4] == pytest.approx(eps)
    assert [r["event"] for r in audit(pol)] == ["subset_charged"]      # EXPLAIN is not a query


def test_the_cache_codec_keeps_types():
    rows = [("CA", 1, 2.5, None, True, Decimal("1.25"), dt.date(2020, 1, 2), dt.datetime(2020, 1, 2, 3, 4, 5),
             b"\x00\xff", float("inf"))]
    back = decode(encode({"rows": rows}))["rows"]
    assert [tuple(r) for r in back] == rows
    assert [type(v) for v in back[0]] == [type(v) for v in rows[0]]


def test_the_cache_keeps_answers_apart_by_what_is_computed_over_the_released_rows(target, tmp_path):
    """Window functions and SELECT DISTINCT run over an aggregate query's released rows: two
    queries with one aggregate query and different outer parts are two answers, not one."""
    core = "SELECT state, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM people GROUP BY state"
    with connect(target, policy_for(tmp_path)) as conn:
        cur = conn.cursor()
        by_rank = cur.execute(core + " ORDER BY r").fetchall()
        assert [r[2] for r in by_rank] == sorted(r[2] for r in by_rank)
        assert cur.execute(core + " ORDER BY r").fetchall() == by_rank and cur.cached
        by_state = cur.execute(core + " ORDER BY state").fetchall()
        assert not cur.cached and [r[0] for r in by_state] == sorted(r[0] for r in by_state)
        cur.execute("SELECT DISTINCT state, COUNT(*) AS n FROM people GROUP BY state")
        assert not cur.cached
