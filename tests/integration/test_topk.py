"""SET dpsql.topk = 'noisy_max' end to end on DuckDB and PostgreSQL (Spark with the spark marker):
the k keys come out right, in rank order, on data with clear gaps; the value of each selected key
is measured afresh; refusals charge nothing; the charge under basic and zCDP accounting.

PostgreSQL: the `target` fixture uses tests/conftest.postgres_server, which fails (not skips) when
CI=true and the server is unreachable.

Why the keys are right with high probability: at each peel a key whose score is G below the best
remaining one is picked with probability at most exp(-G / scale) (scale = the mechanism's
temperature, dpsql.noise.topk), so a wrong key at any peel has probability at most
k * D * exp(-G_min / scale). Each test asserts that its data's smallest gap G_min is at least 40
scales, so a false failure has probability below k * D * e^-40 < 1e-15."""
from __future__ import annotations

import pytest

import dpsql
from dpsql.errors import QueryRejected
from tests.conftest import policy_for
from tests.integration.test_joins import _truth

MARGIN = 40        # the smallest gap between the true top-k scores and the rest, in temperatures


@pytest.fixture
def topk(tmp_path, target):
    opened = []

    def open_(epsilon: float = 1.0, cache: int = 0, **budget):
        pol = policy_for(tmp_path, epsilon=1e6)
        pol["budget"].update(budget)
        pol["reconstruction"] = {"cache_lifetime": cache}
        c = dpsql.connect(target, policy=pol, analyst="a")
        cur = c.cursor()
        cur.execute("SET dpsql.topk = 'noisy_max'")
        cur.execute(f"SET dpsql.epsilon = {epsilon}")
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


def _ranked(people_db, sql):
    """The true (key, score) pairs, best first, from the bounded truth query."""
    return sorted(_truth(people_db, sql), key=lambda r: -float(r[1]))


def _gap(ranked, k):
    """The smallest gap between consecutive scores among the first k + 1 (the ranking needs all)."""
    return min(float(ranked[i][1]) - float(ranked[i + 1][1]) for i in range(min(k, len(ranked) - 1)))


def test_top_two_states_by_count_with_fresh_values(target, people_db, topk):
    conn = topk(4.0)
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 2")
    rows = cur.fetchall()
    truth = _ranked(people_db, "SELECT state, COUNT(*) FROM people GROUP BY state")
    # keys and values both released: selection at epsilon 2 over 2 peels, monotone count, Delta 1
    scale = 1 / (2.0 / 2)
    assert _gap(truth, 2) >= MARGIN * scale
    assert [r[0] for r in rows] == [truth[0][0], truth[1][0]]
    acc = cur.accuracy
    assert acc[0] is None and acc[1].mechanism == "laplace"
    assert all(h[0] is None and h[1] == pytest.approx(acc[1].ci95) for h in cur.half_widths)
    for (key, v), (_, n) in zip(rows, truth[:2]):
        assert abs(v - n) <= 10 * acc[1].ci95        # 30 Laplace scales: e^-30 per value
    assert conn.session.spending().epsilon_spent == pytest.approx(4.0)
    assert "top 2 of 8 keys chosen by report-noisy-max" in cur.statusmessage


def test_bottom_one_education_by_count(people_db, topk):
    cur = topk(1.0).cursor()
    cur.execute("SELECT education FROM people GROUP BY education ORDER BY COUNT(*) ASC LIMIT 1")
    truth = sorted(_truth(people_db, "SELECT education, COUNT(*) FROM people GROUP BY education"),
                   key=lambda r: r[1])
    assert truth[1][1] - truth[0][1] >= MARGIN * 1        # scale 1/1 = 1
    assert cur.fetchall() == [(truth[0][0],)]
    assert cur.accuracy == [None] and cur.half_widths == [(None,)]


def test_top_education_by_sum_of_income(people_db, topk):
    cur = topk(100.0).cursor()
    cur.execute("SELECT education FROM people GROUP BY education ORDER BY SUM(income) DESC LIMIT 2")
    truth = _ranked(people_db, "SELECT education, SUM(LEAST(GREATEST(income, 0), 500000)) FROM people "
                               "GROUP BY education")
    scale = 500_000 / (100.0 / 2)                       # monotone (bounds [0, 500000]), 2 peels
    assert _gap(truth, 2) >= MARGIN * scale
    assert cur.fetchall() == [(truth[0][0],), (truth[1][0],)]


def test_public_table_and_derived_domains(people_db, topk):
    cur = topk(4.0).cursor()       # selection at 2 over 2 peels: scale 1
    cur.execute("SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state "
                "GROUP BY r.region ORDER BY n DESC LIMIT 2")
    truth = _ranked(people_db, "SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state "
                               "GROUP BY r.region")
    assert _gap(truth, 2) >= MARGIN * 1
    assert [r[0] for r in cur.fetchall()] == [truth[0][0], truth[1][0]]
    cur.execute("SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' END AS g "
                "FROM people GROUP BY 1 ORDER BY COUNT(*) DESC LIMIT 1")
    truth = _ranked(people_db, "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' "
                               "END, COUNT(*) FROM people GROUP BY 1")
    assert _gap(truth, 1) >= MARGIN * 1 / 4      # keys only: 4 over 1 peel
    assert cur.fetchall() == [(truth[0][0],)]


def test_visits_with_two_groups_per_person(people_db, topk):
    """visits: 5 rows and 2 states per person; the salted group choice keeps every state of a person
    with at most 2, so the top state's bounded count is at least its count over those people (rows
    clamped to 5), and every other state's bounded count is at most its raw count."""
    conn = topk(2.0)
    cur = conn.cursor()
    cur.execute("SELECT state FROM visits GROUP BY state ORDER BY COUNT(*) DESC LIMIT 1")
    raw = _ranked(people_db, "SELECT state, COUNT(*) FROM visits GROUP BY state")
    (low,), = _truth(people_db, f"SELECT SUM(LEAST(c, 5)) FROM (SELECT person_id, COUNT(*) AS c FROM visits "
                                f"WHERE state = '{raw[0][0]}' AND person_id IN (SELECT person_id FROM visits "
                                "GROUP BY person_id HAVING COUNT(DISTINCT state) <= 2) GROUP BY person_id) t")
    assert low - raw[1][1] >= MARGIN * 5 / 2          # Delta 5, one peel at epsilon 2
    assert cur.fetchall() == [(raw[0][0],)]
    assert conn.session.spending().epsilon_spent == pytest.approx(2.0)


@pytest.mark.parametrize("sql, reason", [
    ("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 2 OFFSET 1", "OFFSET"),
    ("SELECT age, COUNT(*) AS n FROM people GROUP BY age ORDER BY n DESC LIMIT 2", "public domain"),
    ("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 100", "larger than"),
])
def test_refusals_charge_nothing(topk, sql, reason):
    conn = topk(1.0)
    with pytest.raises(QueryRejected, match=reason):
        conn.cursor().execute(sql)
    assert conn.session.spending().epsilon_spent == 0


def test_off_answers_the_histogram_and_show_reset(topk):
    conn = topk(1.0)
    cur = conn.cursor()
    cur.execute("SHOW dpsql.topk")
    assert cur.fetchall() == [("noisy_max",)]
    cur.execute("RESET dpsql.topk")
    cur.execute("SHOW dpsql.topk")
    assert cur.fetchall() == [("off",)]
    cur.execute("EXPLAIN DP SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 2")
    assert not any("noisy_max" in str(r) for r in cur.fetchall())
    with pytest.raises(dpsql.errors.InvalidSetting):
        cur.execute("SET dpsql.topk = 'gumbel'")


def test_explain_shows_mechanism_k_sensitivity_and_split(topk):
    cur = topk(1.0).cursor()
    cur.execute("EXPLAIN DP (WIDE) SELECT state, COUNT(*) AS n FROM visits GROUP BY state ORDER BY n DESC LIMIT 3")
    rows = {r[0]: r for r in cur.fetchall()}
    t, v, charge = rows["topk"], rows["value"], rows["charge"]
    assert t[2] == "noisy_max" and t[3] == 5 and t[4] == 0.5 and "top 3 of 8" in t[8]
    assert t[9] == pytest.approx(0.5 ** 2 / (8 * 3))
    assert v[2] == "laplace" and v[3] == 10 and v[4] == 0.5 and "3 selected keys" in v[8]
    assert charge[4] == 1.0 and "0.5 to the top-3 selection" in charge[8]
    assert charge[9] == pytest.approx(0.5 ** 2 / 24 + 0.5 ** 2 / 2)


def test_zcdp_charge_and_rho_calibration(topk):
    conn = topk(1.0, accountant="zcdp", delta=1e-6)
    cur = conn.cursor()
    cur.execute("SELECT state FROM people GROUP BY state ORDER BY COUNT(*) DESC LIMIT 3")
    assert len(cur.fetchall()) == 3
    assert float(conn.session.spending().rho_spent) == pytest.approx(1.0 / 24, rel=1e-6)
    # SET dpsql.rho calibrates the selection's epsilon: rho = eps^2 / (8k)
    cur.execute("SET dpsql.rho = 0.5")
    plan = conn.session.plan("SELECT state FROM people GROUP BY state ORDER BY COUNT(*) DESC LIMIT 3")
    assert plan.topk is not None and plan.topk.epsilon == pytest.approx((0.5 * 24) ** 0.5, rel=1e-5)
    before = conn.session.spending().rho_spent
    cur.execute("SELECT state FROM people GROUP BY state ORDER BY COUNT(*) DESC LIMIT 3")
    assert conn.session.spending().rho_spent - before == pytest.approx(0.5, rel=1e-5)


def test_the_answer_cache_keeps_top_k_and_histogram_apart(topk):
    """The reconstruction defence's cache repeats an identical earlier answer for free; a top-k and a
    histogram of the same text are different answers."""
    conn = topk(1.0, cache=3600)
    cur = conn.cursor()
    sql = "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 2"
    cur.execute(sql)
    first = cur.fetchall()
    cur.execute(sql)
    assert conn.session.spending().epsilon_spent == pytest.approx(1.0) and cur.fetchall() == first
    cur.execute("SET dpsql.topk = off")
    cur.execute(sql)
    assert conn.session.spending().epsilon_spent == pytest.approx(2.0)
