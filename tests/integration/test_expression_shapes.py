"""Expressions, buckets and the new aggregates on DuckDB, PostgreSQL and Spark, against the
bounded truth (hand-written SQL on the same data; the epsilon is so large that the noise is far
below the tolerance). people: one row per person, one group per person, so the group choice
cannot matter."""
from __future__ import annotations

import datetime
import math

import pytest

from tests.integration.test_joins import EPS, _close, _truth, connect  # noqa: F401 (fixture)

CASES = {
    "bucket": (
        "SELECT age / 10 * 10 AS band, COUNT(*) AS n FROM people GROUP BY band",
        # every band of [0, 120] is released, the empty ones too
        "SELECT b * 10, COALESCE(n, 0) FROM range(0, 13) r(b) LEFT JOIN "
        "(SELECT LEAST(GREATEST(age, 0), 120) // 10 AS k, COUNT(*) n FROM people GROUP BY 1) c ON c.k = r.b"),
    "case_key": (
        "SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS g, AVG(income) AS a FROM people GROUP BY 1",
        "SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END, AVG(LEAST(GREATEST(income, 0), 500000)) "
        "FROM people GROUP BY 1"),
    "condition_key": (
        "SELECT age > 50 AS senior, COUNT(*) AS n FROM people GROUP BY age > 50",
        "SELECT age > 50, COUNT(*) FROM people WHERE age IS NOT NULL GROUP BY 1"),
    "sum_case": (
        "SELECT SUM(CASE WHEN sex = 'F' THEN 1 ELSE 0 END) AS f FROM people",
        "SELECT SUM(CASE WHEN sex = 'F' THEN 1 ELSE 0 END) FROM people"),
    "filter": (
        "SELECT COUNT(*) FILTER (WHERE age > 50) AS old, COUNT(*) AS n FROM people",
        "SELECT COUNT(*) FILTER (WHERE age > 50), COUNT(*) FROM people"),
    "avg_expression": (
        "SELECT AVG(income / 1000) AS k FROM people",
        "SELECT AVG(LEAST(GREATEST(income, 0), 500000) / 1000) FROM people"),
    "count_distinct_unit": (
        "SELECT state, COUNT(DISTINCT person_id) AS n FROM visits GROUP BY state",
        # each person counts once in each of at most 2 states (the group choice keeps 2 of 3 at most)
        None),
    "extract_year": (
        # two years, two groups per person: the group choice keeps every group; 5 visits per group
        "SELECT EXTRACT(year FROM visit_date) AS y, COUNT(*) AS n FROM visits GROUP BY 1",
        "SELECT y, SUM(LEAST(n, 5)) FROM (SELECT person_id, EXTRACT(year FROM visit_date) y, COUNT(*) n "
        "FROM visits GROUP BY 1, 2) GROUP BY y"),
    "date_part_sum": (
        "SELECT date_part('year', visit_date) AS y, SUM(cost) AS c FROM visits WHERE kind = 'lab' GROUP BY y",
        "SELECT y, SUM(LEAST(c, 5 * 2000)) FROM (SELECT person_id, EXTRACT(year FROM visit_date) y, "
        "SUM(LEAST(GREATEST(cost, 0), 2000)) c, COUNT(*) n FROM visits WHERE kind = 'lab' GROUP BY 1, 2) GROUP BY y"),
    "width_bucket": (
        # PostgreSQL's WIDTH_BUCKET on the clamped age; every bucket [0, 120] can reach is released
        "SELECT width_bucket(age, 0, 100, 5) AS b, COUNT(*) AS n FROM people GROUP BY b",
        "SELECT b, COALESCE(n, 0) FROM range(1, 7) r(b) LEFT JOIN (SELECT CASE WHEN a >= 100 THEN 6 "
        "ELSE CAST(floor(a * 5 / 100) AS BIGINT) + 1 END AS k, COUNT(*) n FROM (SELECT LEAST(GREATEST(age, 0), 120) "
        "AS a FROM people WHERE age IS NOT NULL) GROUP BY 1) c ON c.k = r.b"),
    "where_extract": (
        # date functions of a bounded DATE in WHERE (a per-row flag); Spark's DOW is renumbered
        "SELECT COUNT(*) AS n FROM visits WHERE EXTRACT(year FROM visit_date) = 2024 "
        "AND EXTRACT(dow FROM visit_date) IN (0, 6)",
        "SELECT SUM(LEAST(n, 5)) FROM (SELECT person_id, COUNT(*) n FROM visits WHERE EXTRACT(year FROM visit_date) "
        "= 2024 AND EXTRACT(dow FROM visit_date) IN (0, 6) GROUP BY 1)"),
    "where_date_trunc_key": (
        "SELECT EXTRACT(quarter FROM visit_date) AS q, COUNT(*) AS n FROM visits "
        "WHERE date_trunc('month', visit_date) BETWEEN DATE '2024-01-01' AND '2024-06-01' GROUP BY 1",
        # every quarter is released (the derived domain; WHERE on a function does not narrow it)
        "SELECT q, SUM(LEAST(COALESCE(n, 0), 5)) FROM range(1, 5) r(q) LEFT JOIN (SELECT person_id, "
        "EXTRACT(quarter FROM visit_date) k, COUNT(*) n FROM visits WHERE visit_date BETWEEN DATE '2024-01-01' "
        "AND DATE '2024-06-30' GROUP BY 1, 2) c ON c.k = r.q GROUP BY q"),
    "filter_extract": (
        "SELECT COUNT(*) FILTER (WHERE EXTRACT(month FROM visit_date) = 3) AS march, "
        "SUM(CASE WHEN date_trunc('year', visit_date) = DATE '2023-01-01' THEN 1 ELSE 0 END) AS y2023 FROM visits",
        "SELECT SUM(LEAST(m, 5)), SUM(LEAST(y, 5)) FROM (SELECT person_id, COUNT(*) FILTER (WHERE "
        "EXTRACT(month FROM visit_date) = 3) m, SUM(CASE WHEN EXTRACT(year FROM visit_date) = 2023 THEN 1 ELSE 0 END) y "
        "FROM visits GROUP BY 1)"),
    "narrowed_domain": (
        "SELECT state, COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') GROUP BY state",
        "SELECT state, COUNT(*) FROM people WHERE state IN ('CA', 'NY') GROUP BY state"),
}


@pytest.mark.parametrize("case", CASES)
def test_expression_shapes_answer_the_bounded_truth(target, people_db, connect, case):  # noqa: F811
    sql, truth = CASES[case]
    cur = connect(target).cursor()
    cur.execute(sql)
    if truth is None:
        rows = cur.fetchall()
        exact = dict(_truth(people_db, "SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state"))
        for state, n in rows:      # at most the distinct count; most people have visits in one state
            assert n <= exact[state] + 1 and n >= 0.8 * exact[state], (state, n, exact[state])
        return
    _close(cur, _truth(people_db, truth))


def test_variance_and_stddev_near_the_clamped_truth(target, people_db, connect):  # noqa: F811
    cur = connect(target).cursor()
    cur.execute("SELECT VAR_POP(age) AS v, STDDEV_SAMP(income) AS s FROM people")
    (v, s), (hv, hs) = cur.fetchone(), cur.half_widths[0]
    (tv, ts), = _truth(people_db, "SELECT VAR_POP(LEAST(GREATEST(age, 0), 120)), "
                                  "STDDEV_SAMP(LEAST(GREATEST(income, 0), 500000)) FROM people")
    assert v == pytest.approx(tv, abs=10 * hv + 1e-6) and s == pytest.approx(ts, abs=10 * hs + 1e-6)
    assert 0 <= v <= 60 ** 2 and 0 <= s <= 250000 and math.isfinite(hv) and math.isfinite(hs)


@pytest.mark.parametrize("unit, n", [("month", 24), ("quarter", 8), ("year", 2), ("week", 106)])
def test_date_trunc_releases_every_period_of_the_declared_dates(target, people_db, connect, unit, n):  # noqa: F811
    """date_trunc of a DATE with declared bounds (2023-01-01 .. 2024-12-31) groups by its derived
    domain: every period is released, as a date, in the engine's and Python's calendar alike."""
    cur = connect(target).cursor()
    cur.execute(f"SELECT date_trunc('{unit}', visit_date) AS p, COUNT(*) AS c FROM visits GROUP BY 1 ORDER BY 1")
    rows = cur.fetchall()
    truth = dict(_truth(people_db, f"SELECT CAST(date_trunc('{unit}', visit_date) AS DATE), COUNT(*) FROM visits "
                                   "GROUP BY 1"))
    assert [r[0] for r in rows] == sorted(truth) and len(rows) == n
    assert all(isinstance(r[0], datetime.date) for r in rows)
    for (p, c), (_, hw) in zip(rows, cur.half_widths):
        # each person keeps at most 2 periods and 5 visits in each: at most the truth, plus noise
        assert c <= truth[p] + 10 * hw


@pytest.mark.parametrize("field, values", [("dow", range(7)), ("isodow", range(1, 8)), ("month", range(1, 13)),
                                           ("quarter", range(1, 5)), ("doy", range(1, 367))])
def test_extract_fields_agree_across_engines(target, people_db, connect, field, values):  # noqa: F811
    """Each engine's field numbering is mapped to PostgreSQL's (Spark counts DOW from 1): with a
    WHERE keeping one day, exactly that day's group holds the rows."""
    cur = connect(target).cursor()
    cur.execute(f"SELECT EXTRACT({field} FROM visit_date) AS f, COUNT(*) AS c FROM visits "
                f"WHERE visit_date = DATE '2024-03-03' GROUP BY 1")
    rows = dict(cur.fetchall())
    assert sorted(rows) == list(values)
    (n,), = _truth(people_db, "SELECT COUNT(*) FROM visits WHERE visit_date = DATE '2024-03-03'")
    expect = {"dow": 0, "isodow": 7, "month": 3, "quarter": 1, "doy": 63}[field]     # a Sunday, day 63 of 2024
    hw = cur.half_widths[0][1]
    assert rows[expect] == pytest.approx(n, abs=10 * hw)
    assert all(abs(c) < 10 * hw for f, c in rows.items() if f != expect)
