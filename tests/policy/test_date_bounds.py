"""Date bounds (`lower`/`upper` as dates or date-times): what the policy accepts, and which engine
types each fits (dpsql.analysis.sqltypes.date_bounds_problem, checked when a session opens)."""
from __future__ import annotations

import datetime as dt
import tomllib

import pytest

import dpsql
from dpsql.analysis.analyze import Schema, check_policy_types
from dpsql.policy import load_policy


def pol(lower, upper) -> dict:
    return {"budget": {"epsilon": 1.0, "ledger": "budget.sqlite"},
            "tables": {"t": {"privacy_unit": "pid", "columns": {"c": {"lower": lower, "upper": upper}}}}}


def column(lower, upper):
    return load_policy(pol(lower, upper)).table("t").column("c")


@pytest.mark.parametrize("lower, upper, span", [
    ("2023-01-01", "2024-12-31", (dt.datetime(2023, 1, 1), dt.datetime(2024, 12, 31, 23, 59, 59, 999999))),
    (dt.datetime(2023, 1, 1, 8, 30), dt.date(2023, 1, 1),
     (dt.datetime(2023, 1, 1, 8, 30), dt.datetime(2023, 1, 1, 23, 59, 59, 999999))),
    ("2023-01-01 08:00:00", "2023-01-01T09:00:00.25",
     (dt.datetime(2023, 1, 1, 8), dt.datetime(2023, 1, 1, 9, 0, 0, 250000))),
    ("0001-01-01 00:00:00", "9999-12-31 23:59:59.999999", (dt.datetime.min, dt.datetime.max)),
])
def test_timestamp_bounds_are_dates_or_local_date_times(lower, upper, span):
    c = column(lower, upper)
    assert c.time_span == span and c.lower is None and not c.bounded


def test_toml_date_times_are_read_as_local_date_times():
    text = "[budget]\nepsilon = 1.0\nledger = 'b.sqlite'\n[tables.t]\nprivacy_unit = 'pid'\n" \
           "[tables.t.columns]\nc = { lower = 2023-01-01T08:00:00, upper = 2024-12-31 }\n"
    c = load_policy(tomllib.loads(text)).table("t").column("c")
    assert c.timed and c.time_span[0] == dt.datetime(2023, 1, 1, 8)


@pytest.mark.parametrize("lower, upper, key, problem", [
    (dt.datetime(2023, 1, 1, tzinfo=dt.timezone.utc), "2024-01-01", "c.lower", "offset"),
    ("2023-01-01T08:00:00Z", "2024-01-01", "c.lower", "date-time written"),
    ("2023-01-01 08:00", "2024-01-01", "c.lower", "date-time written"),
    ("2023-01-01 25:00:00", "2024-01-01", "c.lower", "date-time written"),
    ("2023-01-01 00:00:00.1234567", "2024-01-01", "c.lower", "date-time written"),
    ("2024-01-02 00:00:00", "2024-01-01", "columns.c", "lower <= upper"),    # a date upper bound: its last instant
    ("2024-01-02", "2024-01-01 23:00:00", "columns.c", "lower <= upper"),
])
def test_bad_date_time_bounds_are_refused_with_the_key(lower, upper, key, problem):
    with pytest.raises(dpsql.PolicyError) as err:
        column(lower, upper)
    assert key in str(err.value) and problem in str(err.value)


@pytest.mark.parametrize("sql_type, lower, upper, problem", [
    ("DATE", "2023-01-01", "2024-12-31", None),
    ("DATE", "2023-01-01 00:00:00", "2024-12-31", "a DATE column's bounds are dates"),
    ("TIMESTAMP", "2023-01-01 08:00:00", "2024-12-31", None),
    ("timestamp(3) without time zone", "2023-01-01", "2024-12-31", None),
    ("TIMESTAMP_NS", "1678-01-01", "2261-12-31 23:59:59", None),
    ("TIMESTAMP_NS", "1677-12-31", "2000-01-01", "1678-2261"),
    ("TIMESTAMP_NS", "2000-01-01", "9999-12-31", "1678-2261"),
    ("TIMESTAMP WITH TIME ZONE", "2023-01-01", "2024-12-31", "session's time zone"),
    ("timestamptz", "2023-01-01", "2024-12-31", "session's time zone"),
    ("VARCHAR", "2023-01-01", "2024-12-31", "not a DATE or TIMESTAMP"),
])
def test_date_bounds_must_fit_the_column_type(sql_type, lower, upper, problem):
    p = load_policy(pol(lower, upper))
    found = check_policy_types(p, Schema(columns={"t": {"pid": "BIGINT", "c": sql_type}}))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith("tables.t.columns.c: ") and problem in found[0]


def test_a_session_does_not_open_with_date_times_on_a_date_column(tmp_path, people_db):
    from tests.conftest import policy_for
    p = policy_for(tmp_path)
    p["tables"]["visits"]["columns"]["visit_date"] = {"lower": "2023-01-01 00:00:00", "upper": "2024-12-31"}
    with pytest.raises(dpsql.PolicyError, match=r"columns.visit_date: a DATE column's bounds are dates"):
        dpsql.connect(people_db, policy=p, analyst="a")
