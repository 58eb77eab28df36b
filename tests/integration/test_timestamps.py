"""Bounded TIMESTAMP columns and date functions in WHERE (issue 15) on DuckDB and PostgreSQL,
against the bounded truth: hand-written SQL on the same rows, the column clamped to its declared
bounds by hand; the epsilon is so large that the noise is far below the tolerance. Each person
has three events, so no group or row is dropped by contribution bounding; some events lie before
or after the declared bounds (clamped to them) and some are NULL.

On PostgreSQL the same query under two session time zones releases the same values (seeded
noise): a timestamp without time zone is clamped, truncated and taken apart as wall-clock time."""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest

import dpsql
from dpsql.noise.rng import SeededRng
from dpsql.session import Session
from tests.conftest import copy_to_postgres, postgres_database

EPS = 20000.0
LO, HI = "TIMESTAMP '2023-01-01 00:00:00'", "TIMESTAMP '2024-12-31 23:59:59.999999'"
CLAMPED = f"(CASE WHEN seen_at < {LO} THEN {LO} WHEN seen_at > {HI} THEN {HI} ELSE seen_at END)"
DAY_LO, DAY_HI = "DATE '2023-01-01'", "DATE '2024-12-31'"
DAY = f"(CASE WHEN visit_day < {DAY_LO} THEN {DAY_LO} WHEN visit_day > {DAY_HI} THEN {DAY_HI} ELSE visit_day END)"


def _policy(tmp_path) -> dict:
    return {"budget": {"epsilon": 1e9, "delta": 0.5, "ledger": str(tmp_path / "ledger.sqlite")},
            "defaults": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},
            "timing": {"quantum": 0, "floor": 0}, "reconstruction": {"cache_lifetime": 0},
            "tables": {"events": {"privacy_unit": "person_id", "max_rows_per_unit": 3, "max_groups_per_unit": 3,
                                  "columns": {"seen_at": {"lower": "2023-01-01 00:00:00", "upper": "2024-12-31"},
                                              "visit_day": {"lower": "2023-01-01", "upper": "2024-12-31"}}}}}


@pytest.fixture(scope="module")
def events_db(tmp_path_factory) -> str:
    """events(person_id, seen_at, visit_day): 900 people, 3 events each, from 2022-12-01 to 2025-02-08
    (the ends outside the declared bounds), one in 50 NULL."""
    path = str(tmp_path_factory.mktemp("ts") / "events.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE events (person_id BIGINT NOT NULL, seen_at TIMESTAMP, visit_day DATE)")
    con.execute("INSERT INTO events SELECT p, CASE WHEN (p + k) % 50 = 0 THEN NULL "
                "ELSE TIMESTAMP '2022-12-01 00:00:00' "
                "+ to_minutes(CAST((p * 7919 + k * 104729) % (800 * 24 * 60) AS BIGINT)) END, "
                "CAST(DATE '2022-12-01' + CAST((p * 13 + k * 331) % 800 AS INTEGER) AS DATE) "
                "FROM range(1, 901) a(p), range(0, 3) b(k)")
    con.close()
    return path


@pytest.fixture(scope="module")
def events_pg(postgres_server, events_db) -> str:
    with postgres_database(postgres_server, "dpsql_ts") as dsn:
        copy_to_postgres(events_db, dsn)
        yield dsn


@pytest.fixture(params=["duckdb", "postgres"])
def events_target(request, events_db) -> str:
    return request.getfixturevalue("events_pg") if request.param == "postgres" else events_db


def _truth(events_db: str, sql: str) -> list[tuple]:
    con = duckdb.connect(events_db, read_only=True)
    try:
        return sorted(con.execute(sql).fetchall(), key=lambda r: tuple(str(v) for v in r))
    finally:
        con.close()


CASES = {
    "month": ("SELECT date_trunc('month', seen_at) AS m, COUNT(*) AS n FROM events GROUP BY 1",
              # every month of the bounds is released (a derived domain: no partition selection)
              "SELECT m, COALESCE(n, 0) FROM (SELECT CAST(TIMESTAMP '2023-01-01 00:00:00' "
              "+ to_months(CAST(i AS INTEGER)) "
              f"AS TIMESTAMP) m FROM range(0, 24) r(i)) LEFT JOIN (SELECT date_trunc('month', {CLAMPED}) k, COUNT(*) n "
              "FROM events GROUP BY 1) c ON c.k = m"),
    "hour_where_weekend": (
        "SELECT EXTRACT(hour FROM seen_at) AS h, COUNT(*) AS n FROM events "
        "WHERE EXTRACT(dow FROM seen_at) IN (0, 6) GROUP BY 1",
        f"SELECT h, COALESCE(n, 0) FROM range(0, 24) r(h) LEFT JOIN (SELECT EXTRACT(hour FROM {CLAMPED}) k, COUNT(*) n "
        f"FROM events WHERE EXTRACT(dow FROM {CLAMPED}) IN (0, 6) GROUP BY 1) c ON c.k = h"),
    "where_year_and_quarter": (
        "SELECT COUNT(*) AS n FROM events WHERE EXTRACT(year FROM seen_at) = 2024 "
        "AND date_trunc('quarter', seen_at) BETWEEN TIMESTAMP '2024-01-01 00:00:00' AND DATE '2024-06-30'",
        f"SELECT COUNT(*) FROM events WHERE EXTRACT(year FROM {CLAMPED}) = 2024 AND "
        f"date_trunc('quarter', {CLAMPED}) BETWEEN TIMESTAMP '2024-01-01' AND TIMESTAMP '2024-06-30'"),
    "filter_and_case": (
        "SELECT COUNT(*) FILTER (WHERE date_trunc('day', seen_at) = DATE '2023-01-01') AS first_day, "
        "SUM(CASE WHEN EXTRACT(hour FROM seen_at) < 12 THEN 1 ELSE 0 END) AS morning FROM events",
        # events before the bounds are clamped onto their first instant: they count on the first day
        f"SELECT COUNT(*) FILTER (WHERE date_trunc('day', {CLAMPED}) = TIMESTAMP '2023-01-01'), "
        f"SUM(CASE WHEN EXTRACT(hour FROM {CLAMPED}) < 12 THEN 1 ELSE 0 END) FROM events"),
    "raw_column_where_year_key": (
        "SELECT date_trunc('year', seen_at) AS y, COUNT(*) AS n FROM events "
        "WHERE seen_at >= TIMESTAMP '2024-01-01 00:00:00' "
        "GROUP BY 1",
        # the WHERE reads the column itself (unclamped), the key the clamped value
        f"SELECT y, COALESCE(n, 0) FROM (VALUES (TIMESTAMP '2023-01-01'), (TIMESTAMP '2024-01-01')) v(y) LEFT JOIN "
        f"(SELECT date_trunc('year', {CLAMPED}) k, COUNT(*) n FROM events WHERE seen_at >= TIMESTAMP '2024-01-01' "
        "GROUP BY 1) c ON c.k = y"),
    "date_where": (
        "SELECT COUNT(*) AS n FROM events WHERE EXTRACT(month FROM visit_day) = 3 "
        "OR date_trunc('month', visit_day) = '2024-12-01'",
        f"SELECT COUNT(*) FROM events WHERE EXTRACT(month FROM {DAY}) = 3 OR date_trunc('month', {DAY}) = "
        "TIMESTAMP '2024-12-01'"),
}


@pytest.mark.parametrize("case", CASES)
def test_timestamp_and_date_functions_answer_the_bounded_truth(events_target, events_db, tmp_path, case):
    sql, truth = CASES[case]
    want = _truth(events_db, truth)
    con = dpsql.connect(events_target, policy=_policy(tmp_path), analyst="a")
    try:
        cur = con.cursor()
        cur.execute(f"SET dpsql.epsilon = {EPS}")
        cur.execute(sql)
        got = sorted(zip(cur.fetchall(), cur.half_widths), key=lambda r: tuple(str(v) for v in r[0]))
    finally:
        con.close()
    assert len(got) == len(want), (got, want)
    for (row, hw), w in zip(got, want):
        for a, b, h in zip(row, w, hw):
            if isinstance(b, dt.datetime):
                assert isinstance(a, dt.datetime) and a == b, (row, w)
            else:
                assert a == pytest.approx(float(b), abs=10 * (h or 0.01)), (row, w, hw)
    assert any(float(v) > 0 for (row, _) in got for v in row if not isinstance(v, dt.datetime))


def _with_time_zone(dsn: str, zone: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + "options=-c%20TimeZone%3D" + zone.replace("/", "%2F")


def test_postgres_session_time_zone_does_not_change_the_answer(events_pg, tmp_path):
    """The engine session's time zone must not change what is released: the same queries, with
    the same seeded noise, under UTC and under zones east and west with odd offsets."""
    queries = [CASES["month"][0], CASES["hour_where_weekend"][0], CASES["filter_and_case"][0],
               "SELECT EXTRACT(day FROM seen_at) AS d, "
               "date_trunc('hour', seen_at) < TIMESTAMP '2023-06-01 12:00:00' AS early, COUNT(*) FROM events "
               "WHERE date_trunc('week', seen_at) <> TIMESTAMP '2023-03-27 00:00:00' GROUP BY 1, 2"]
    import psycopg
    answers = []
    for zone in ("UTC", "Pacific/Kiritimati", "America/St_Johns"):
        with psycopg.connect(_with_time_zone(events_pg, zone)) as pg:       # the option takes effect
            assert pg.execute("SHOW TIME ZONE").fetchone()[0] == zone
        s = Session.open(_with_time_zone(events_pg, zone), _policy(tmp_path / zone.replace("/", "_")), "a",
                         rng=SeededRng(11))
        try:
            answers.append([s.execute(q).rows for q in queries])
        finally:
            s.close()
    assert answers[0] == answers[1] == answers[2]
    assert len(answers[0][0]) == 24
