"""Row expressions (engine-free): derived ranges, public domains, total SQL, refusals; and the
plans of aggregates over them, FILTER, COUNT(DISTINCT unit), VARIANCE/STDDEV and WHERE's
narrowing of a key's domain."""
from __future__ import annotations

import datetime

import pytest

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.measures import CenteredSum, Count, SquaredSum
from dpsql.analysis.parse import classify
from dpsql.errors import QueryRejected
from dpsql.policy import load_policy
from dpsql.postprocess import Key, Var
from dpsql.rewrite import to_sql

TYPES = {"pid": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR", "score": "DECIMAL(10,2)",
         "flag": "BOOLEAN", "raw": "BIGINT", "day": "DATE", "open_day": "DATE", "at": "TIMESTAMP",
         "seen": "TIMESTAMP", "seen_ns": "TIMESTAMP_NS", "seen_tz": "TIMESTAMP WITH TIME ZONE", "far_ns": "TIMESTAMP_NS"}
POLICY = load_policy({
    "budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": "unused.sqlite"},
    "defaults": {"epsilon": 1.0, "delta": 1e-6},
    "tables": {"p": {"privacy_unit": "pid", "max_rows_per_unit": 2, "max_groups_per_unit": 2, "columns": {
        "age": {"lower": 0, "upper": 120}, "income": {"lower": 0, "upper": 500000},
        "state": {"values": ["CA", "NY", "TX"]}, "score": {"lower": -10, "upper": 10}, "flag": {}, "raw": {},
        "day": {"lower": datetime.date(2023, 1, 1), "upper": "2024-12-31"}, "open_day": {}, "at": {},
        "seen": {"lower": datetime.datetime(2023, 1, 1, 8, 30), "upper": "2024-12-31"},      # upper: that whole day
        "seen_ns": {"lower": "2023-01-01 00:00:00", "upper": "2024-12-31T23:59:59.5"},
        "seen_tz": {"lower": "2023-01-01", "upper": "2024-12-31"},
        "far_ns": {"lower": "0001-01-01", "upper": "9999-12-31"}}}}})
SETTINGS = Settings(1.0, 1e-6, "laplace")


def plan(sql: str, dialect: str = "duckdb"):
    schema = Schema(columns={"p": TYPES}, base_tables=frozenset({"p"}))
    return analyze(classify(sql).tree, POLICY, schema, SETTINGS, dialect)


def refused(sql: str) -> str:
    with pytest.raises(QueryRejected) as err:
        plan(sql)
    return str(err.value)


@pytest.mark.parametrize("expr, domain", [
    ("age / 10 * 10", tuple(range(0, 121, 10))),                       # whole-number buckets of [0, 120]
    ("age / 25", (0, 1, 2, 3, 4)),                                      # integer division truncates
    ("age % 7", tuple(range(7))),
    ("CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' END", ("middle", "old", "young")),
    ("CASE WHEN state = 'CA' THEN 1 ELSE 2 END", (1, 2)),
    ("age > 50", (False, True)),
    ("LEAST(age / 10, 5)", (0, 1, 2, 3, 4, 5)),
    ("WIDTH_BUCKET(age, 0, 100, 10)", tuple(range(1, 12))),           # [0, 120]: no bucket 0, 11 at >= 100
    ("WIDTH_BUCKET(age, 20, 60, 4)", tuple(range(0, 6))),
    ("WIDTH_BUCKET(income, 0, 1000000, 4)", (1, 2, 3)),                 # 500000 is in bucket 3
])
def test_group_by_an_expression_releases_its_derived_domain(expr, domain):
    p = plan(f"SELECT {expr} AS k, COUNT(*) FROM p GROUP BY {expr}")
    assert p.keys[0].domain == domain
    assert p.selection is None and p.domain_size == len(domain)
    assert [o.expr for o in p.outputs][0] == Key(0)


D = datetime.date


@pytest.mark.parametrize("expr, first, last, n", [
    ("date_trunc('month', day)", D(2023, 1, 1), D(2024, 12, 1), 24),
    ("date_trunc('quarter', day)", D(2023, 1, 1), D(2024, 10, 1), 8),
    ("date_trunc('year', day)", D(2023, 1, 1), D(2024, 1, 1), 2),
    ("date_trunc('week', day)", D(2022, 12, 26), D(2024, 12, 30), 106),       # ISO weeks start on Monday
    ("date_trunc('day', day)", D(2023, 1, 1), D(2024, 12, 31), 731),
    ("EXTRACT(year FROM day)", 2023, 2024, 2),
    ("EXTRACT(dow FROM day)", 0, 6, 7),
    ("date_part('isodow', day)", 1, 7, 7),
    ("EXTRACT(doy FROM day)", 1, 366, 366),
    ("EXTRACT(week FROM day)", 1, 52, 52),       # no ISO year among 2022-2025 has a week 53
    ("EXTRACT(month FROM day) / 4", 0, 3, 4),
])
def test_dates_with_declared_bounds_give_derived_domains(expr, first, last, n):
    p = plan(f"SELECT {expr} AS k, COUNT(*) FROM p GROUP BY 1")
    dom = p.keys[0].domain
    assert (dom[0], dom[-1], len(dom)) == (first, last, n) and p.selection is None
    assert p.keys[0].sql_type == ("DATE" if "trunc" in expr else "BIGINT")


def test_date_functions_clamp_first_and_spark_counts_dow_from_sunday_one():
    sql = to_sql(plan("SELECT EXTRACT(dow FROM day) AS k, COUNT(*) FROM p GROUP BY 1", "spark"), "spark")
    assert "CASE WHEN p.day < CAST('2023-01-01' AS DATE)" in sql and "EXTRACT(DAYOFWEEK FROM" in sql and "- 1" in sql
    pg = to_sql(plan("SELECT date_trunc('month', day) AS k, COUNT(*) FROM p GROUP BY 1", "postgres"), "postgres")
    assert "DATE_TRUNC('MONTH', CAST(CASE WHEN" in pg and "AS TIMESTAMP)) AS DATE)" in pg
    s = plan("SELECT SUM(EXTRACT(month FROM day)) AS m FROM p").measures[0]
    assert (s.lo, s.hi) == (1, 12)


def test_group_by_an_output_alias_and_position():
    a = plan("SELECT age / 10 * 10 AS band, COUNT(*) FROM p GROUP BY band")
    b = plan("SELECT age / 10 * 10 AS band, COUNT(*) FROM p GROUP BY 1")
    assert a.keys[0].domain == b.keys[0].domain == tuple(range(0, 121, 10))


def test_expressions_without_a_finite_domain_go_through_partition_selection():
    p = plan("SELECT income / 1000 AS k, COUNT(*) FROM p GROUP BY income / 1000")
    assert p.keys[0].domain is None and p.selection is not None


def test_sum_and_avg_of_expressions_take_their_derived_range():
    p = plan("SELECT SUM(CASE WHEN state = 'CA' THEN 1 ELSE 0 END), AVG(income / 1000), SUM(score * 2) FROM p")
    s, a, _, t = p.measures[0], p.measures[1], p.measures[2], p.measures[3]
    assert (s.lo, s.hi, s.scale) == (0, 1, 1)
    assert (a.lo, a.hi) == (0, 500) and isinstance(a, CenteredSum)
    assert (t.lo, t.hi) == (-20, 20)
    assert p.noise[0].linf == 2 * 1         # max_rows_per_unit x the derived bound


def test_expression_sql_clamps_its_columns_first():
    sql = to_sql(plan("SELECT SUM(age * 2) FROM p"))
    assert "WHEN p.age < 0 THEN 0 WHEN p.age > 120 THEN 120" in sql.replace("\n", " ")


def test_filter_clause_is_a_per_measure_condition():
    p = plan("SELECT COUNT(*) FILTER (WHERE age > 50) AS old, COUNT(*) AS n FROM p")
    assert p.measures[0].filter is not None and p.measures[1].filter is None
    assert p.noise[0].linf == p.noise[1].linf == 2
    sql = to_sql(p).replace(" ", "").replace("\n", "")
    assert "(p.age>50)AS_f0" in sql and "COUNT(*)FILTER(WHERE_f0)AS_v0" in sql


def test_count_distinct_unit_counts_each_unit_once_per_group():
    p = plan("SELECT state, COUNT(DISTINCT pid) FROM p GROUP BY state")
    assert p.measures[0].cap == 1 and p.noise[0].linf == 1 and p.l0 == 2
    assert plan("SELECT COUNT(DISTINCT state) FROM p").distincts      # another column: dpsql.analysis.distinct


def test_variance_and_stddev():
    p = plan("SELECT VARIANCE(age), STDDEV_POP(income) FROM p")
    kinds = {type(m) for m in p.measures}
    assert {SquaredSum, CenteredSum, Count} <= kinds
    sq = next(m for m in p.measures if isinstance(m, SquaredSum) and m.column == "age")
    assert p.noise[p.measures.index(sq)].linf == 2 * 60 ** 2          # rows x ((hi - lo) / 2)^2
    assert isinstance(p.outputs[0].expr, Var) and p.outputs[0].expr.sample is True      # VARIANCE is the sample one
    assert p.outputs[1].expr.sample is False and p.outputs[1].expr.root is True       # STDDEV_POP: root, population


def test_where_narrows_a_public_domain():
    assert plan("SELECT state, COUNT(*) FROM p WHERE state IN ('CA', 'NY') GROUP BY state").keys[0].domain == ("CA", "NY")
    assert plan("SELECT state, COUNT(*) FROM p WHERE state = 'TX' AND age > 3 GROUP BY state").keys[0].domain == ("TX",)
    assert plan("SELECT state, COUNT(*) FROM p WHERE state <> 'TX' GROUP BY state").keys[0].domain == ("CA", "NY")
    assert plan("SELECT state, COUNT(*) FROM p WHERE state = 'CA' OR age > 3 GROUP BY state").keys[0].domain == \
        ("CA", "NY", "TX")                                            # not a conjunct: no narrowing


@pytest.mark.parametrize("sql, reason", [
    ("SELECT SUM(age / income) FROM p", "division by anything but a non-zero number"),
    ("SELECT SUM(age / 0) FROM p", "non-zero"),
    ("SELECT SUM(raw * 2) FROM p", "no declared bounds"),
    ("SELECT SUM(age * 1000000000000000) FROM p", "overflow"),
    ("SELECT SUM(CAST(income AS INTEGER)) FROM p", "round it differently"),
    ("SELECT SUM(LENGTH(state)) FROM p", "in an expression"),
    ("SELECT pid % 2 AS k, COUNT(*) FROM p GROUP BY pid % 2", "no declared bounds"),
    ("SELECT SUM(CASE WHEN age > 3 THEN 'a' ELSE 1 END) FROM p", "different types"),
    ("SELECT date_trunc('month', open_day) AS m, COUNT(*) FROM p GROUP BY 1", "no declared date bounds"),
    ("SELECT EXTRACT(year FROM at) AS y, COUNT(*) FROM p GROUP BY 1", "TIMESTAMP"),
    ("SELECT EXTRACT(year FROM at) AS y, COUNT(*) FROM p GROUP BY 1", "no declared bounds"),
    ("SELECT date_trunc('month', seen_tz) AS m, COUNT(*) FROM p GROUP BY 1", "session's time zone"),
    ("SELECT EXTRACT(hour FROM seen_tz) AS m, COUNT(*) FROM p GROUP BY 1", "TIME ZONE"),
    ("SELECT date_trunc('year', far_ns) AS m, COUNT(*) FROM p GROUP BY 1", "1678-2261"),
    ("SELECT EXTRACT(hour FROM day) AS h, COUNT(*) FROM p GROUP BY 1", "no time of day"),
    ("SELECT EXTRACT(second FROM seen) AS h, COUNT(*) FROM p GROUP BY 1", "fields admitted"),
    ("SELECT date_trunc('second', seen) AS h, COUNT(*) FROM p GROUP BY 1", "units admitted"),
    ("SELECT date_trunc('hour', day) AS m, COUNT(*) FROM p GROUP BY 1", "units admitted"),
    ("SELECT EXTRACT(epoch FROM day) AS m, COUNT(*) FROM p GROUP BY 1", "fields admitted"),
    ("SELECT EXTRACT(year FROM age) AS m, COUNT(*) FROM p GROUP BY 1", "applies to dates"),
])
def test_refusals(sql, reason):
    assert reason in refused(sql)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark"])
def test_every_dialect_generates_it(dialect):
    for sql in ("SELECT age / 10 * 10 AS band, COUNT(*), SUM(score * 2), VARIANCE(income) FROM p GROUP BY band",
                "SELECT COUNT(*) FILTER (WHERE age > 3), COUNT(DISTINCT pid) FROM p"):
        assert to_sql(plan(sql, dialect), dialect)


@pytest.mark.parametrize("expr", ["WIDTH_BUCKET(age, 10, 10, 4)", "WIDTH_BUCKET(age, 50, 10, 4)",
                                  "WIDTH_BUCKET(age, 0, 100, 0)", "WIDTH_BUCKET(age, 0, 100, 10001)",
                                  "WIDTH_BUCKET(age, 0, 100, 2.5)", "WIDTH_BUCKET(age, 0, income, 4)",
                                  "WIDTH_BUCKET(raw, 0, 100, 4)"])
def test_width_bucket_needs_literal_bounds_and_a_bucket_count(expr):
    refused(f"SELECT COUNT(*) FROM p GROUP BY {expr}")


def test_width_bucket_is_clamped_to_its_domain_on_every_engine():
    """The buckets the bounds can reach bound the SQL's result (a rounding at an edge cannot leave
    the domain), and no engine's own WIDTH_BUCKET (missing on DuckDB, failing on NaN in PostgreSQL)
    is called."""
    for dialect in ("duckdb", "postgres", "spark"):
        sql = to_sql(plan("SELECT WIDTH_BUCKET(age, 20, 60, 4) AS b, COUNT(*) FROM p GROUP BY b", dialect), dialect)
        assert "WIDTH_BUCKET" not in sql.upper()
        assert "THEN 0 WHEN" in sql and "> 5 THEN 5" in sql


def test_a_wide_modulo_has_no_domain_and_builds_none():
    """(age * 10^12) % 10^15 can take 1.2 * 10^14 values: thresholded, and the analysis never
    enumerates them (an analyst must not be able to make the server build such a set)."""
    p = plan("SELECT COUNT(*) FROM p GROUP BY (age * 1000000000000) % 1000000000000000")
    assert p.keys[0].domain is None and p.selection is not None


DT = datetime.datetime


@pytest.mark.parametrize("expr, first, last, n", [
    ("date_trunc('month', seen)", DT(2023, 1, 1), DT(2024, 12, 1), 24),     # the lower bound's month, from 00:00
    ("date_trunc('year', seen_ns)", DT(2023, 1, 1), DT(2024, 1, 1), 2),
    ("date_trunc('week', seen)", DT(2022, 12, 26), DT(2024, 12, 30), 106),
    ("date_trunc('day', seen)", DT(2023, 1, 1), DT(2024, 12, 31), 731),     # a date upper bound keeps its day
    ("EXTRACT(hour FROM seen)", 0, 23, 24),
    ("date_part('minute', seen_ns)", 0, 59, 60),
    ("EXTRACT(year FROM seen)", 2023, 2024, 2),
    ("EXTRACT(isodow FROM seen)", 1, 7, 7),
    ("EXTRACT(quarter FROM date_trunc('month', seen))", 1, 4, 4),
])
def test_timestamps_with_declared_bounds_give_derived_domains(expr, first, last, n):
    p = plan(f"SELECT {expr} AS k, COUNT(*) FROM p GROUP BY 1")
    dom = p.keys[0].domain
    assert (dom[0], dom[-1], len(dom)) == (first, last, n) and p.selection is None
    assert p.keys[0].sql_type == ("TIMESTAMP" if "trunc" in expr and "EXTRACT" not in expr else "BIGINT")


def test_timestamp_hours_over_two_years_go_through_partition_selection():
    p = plan("SELECT date_trunc('hour', seen) AS k, COUNT(*) FROM p GROUP BY 1")
    assert p.keys[0].domain is None and p.selection is not None


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_timestamp_functions_clamp_to_timestamp_constants_and_read_a_plain_timestamp(dialect):
    """The clamp compares the column with TIMESTAMP constants (a date upper bound is that day's
    last microsecond), and its result is cast to TIMESTAMP, so TIMESTAMP_NS/_S/_MS and timestamp(p)
    columns reach date_trunc and EXTRACT as one type."""
    sql = to_sql(plan("SELECT date_trunc('month', seen_ns) AS k, COUNT(*) FROM p GROUP BY 1", dialect), dialect)
    assert "< CAST('2023-01-01 00:00:00' AS TIMESTAMP) THEN CAST('2023-01-01 00:00:00' AS TIMESTAMP)" in sql
    assert "> CAST('2024-12-31 23:59:59.500000' AS TIMESTAMP)" in sql
    assert "END AS TIMESTAMP))" in sql and "TIMESTAMPTZ" not in sql.upper().replace("TIMESTAMP)", "")
    sql = to_sql(plan("SELECT COUNT(*) FROM p WHERE EXTRACT(hour FROM seen) = 3", dialect), dialect)
    assert "> CAST('2024-12-31 23:59:59.999999' AS TIMESTAMP)" in sql


def test_timestamp_date_functions_are_refused_on_spark():
    with pytest.raises(QueryRejected, match="Spark"):
        plan("SELECT date_trunc('month', seen) AS k, COUNT(*) FROM p GROUP BY 1", "spark")
    with pytest.raises(QueryRejected, match="Spark"):
        plan("SELECT COUNT(*) FROM p WHERE EXTRACT(year FROM seen) = 2024", "spark")
    plan("SELECT COUNT(*) FROM p WHERE EXTRACT(year FROM day) = 2024", "spark")      # DATE columns are fine there


# ------------------------------------------------------------------ date functions in WHERE, FILTER, CASE WHEN

@pytest.mark.parametrize("where", [
    "EXTRACT(year FROM day) = 2024",
    "2024 <= date_part('year', day)",
    "date_trunc('month', day) = DATE '2024-03-01'",
    "date_trunc('month', day) <> '2024-03-01'",                   # a date string, as PostgreSQL reads it
    "EXTRACT(dow FROM day) IN (0, 6)",
    "EXTRACT(dow FROM day) NOT IN (0, 6) AND EXTRACT(doy FROM day) BETWEEN 1 AND 31.5",
    "(EXTRACT(month FROM day)) = 3 OR age > 3",
    "date_trunc('quarter', day) BETWEEN DATE '0001-01-01' AND DATE '9999-12-31'",
    "EXTRACT(year FROM day) IS NULL",
    "EXTRACT(month FROM day) < 999999999999999999",
    "EXTRACT(year FROM seen) = 2024 AND EXTRACT(hour FROM seen) BETWEEN 8 AND 17",
    "date_trunc('hour', seen) >= TIMESTAMP '2024-01-01 10:00:00'",
    "date_trunc('day', seen_ns) < DATE '2024-01-01'",             # a DATE constant meets a TIMESTAMP
    "date_trunc('month', seen) IN (TIMESTAMP '2024-01-01 00:00:00', DATE '2024-02-01')",
    "seen < TIMESTAMP '2024-06-01 12:00:00'",                     # the column itself, as before
])
@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_where_admits_date_functions_of_bounded_columns_as_a_per_row_flag(where, dialect):
    p = plan(f"SELECT COUNT(*) FROM p WHERE {where}", dialect)
    sql = to_sql(p, dialect)
    # the analyst's WHERE is the per-row flag _h inside FILTER, never the rows' WHERE (timing)
    assert "FILTER(WHERE _h)" in sql.replace(" (", "(")
    rows_where = sql[sql.rindex(" WHERE "):]
    assert "EXTRACT" not in rows_where and "DATE_TRUNC" not in rows_where
    if "seen <" not in where:
        assert "CASE WHEN" in str(p.where.sql(dialect))              # evaluated on the clamped value


def test_date_functions_in_filter_and_case_when():
    p = plan("SELECT COUNT(*) FILTER (WHERE EXTRACT(year FROM day) = 2023) AS a, "
             "SUM(CASE WHEN date_trunc('month', seen) = TIMESTAMP '2024-03-01 00:00:00' THEN 1 ELSE 0 END) AS b FROM p")
    assert p.measures[0].filter is not None and "EXTRACT" in p.measures[0].filter.sql()
    sql = to_sql(p).replace("\n", " ")
    assert "FILTER(WHERE _f0)" in sql.replace(" (", "(") and "DATE_TRUNC('MONTH'" in sql


@pytest.mark.parametrize("where, reason", [
    ("EXTRACT(year FROM day) = DATE '2024-01-01'", "comparing"),
    ("EXTRACT(year FROM day) = '2024'", "comparing"),
    ("date_trunc('month', day) = TIMESTAMP '2024-03-01 00:00:00'", "comparing date with timestamp"),
    ("date_trunc('month', day) = 2024", "comparing"),
    ("date_trunc('month', day) = 'March'", "not a date"),
    ("EXTRACT(year FROM day) = age", "date function with a column"),
    ("EXTRACT(year FROM day) = EXTRACT(year FROM day)", "date function with a column"),
    ("EXTRACT(year FROM open_day) = 2024", "no declared date bounds"),
    ("EXTRACT(year FROM at) = 2024", "no declared bounds"),
    ("EXTRACT(year FROM seen_tz) = 2024", "time zone"),
    ("EXTRACT(year FROM day) = 1e400", "numeric literal"),
    ("EXTRACT(year FROM day) LIKE '2%'", "LIKE on a non-text"),
    ("EXTRACT(year FROM day) IS TRUE", "IS TRUE/FALSE"),
    ("date_trunc('month', day) IN (DATE '2024-02-30')", "malformed date"),
    ("EXTRACT(year FROM day) + 1 = 2024", "arithmetic"),
    ("LENGTH(state) = 2", "function"),
])
def test_where_refuses_date_functions_it_cannot_prove_total(where, reason):
    assert reason in refused(f"SELECT COUNT(*) FROM p WHERE {where}")


def test_where_on_a_date_function_does_not_narrow_a_key_domain():
    """Narrowing reads only col = literal on a bare column: a date function's WHERE leaves the
    derived domain whole (every month is released; the others carry noise only)."""
    p = plan("SELECT date_trunc('month', day) AS m, COUNT(*) FROM p WHERE EXTRACT(year FROM day) = 2024 GROUP BY 1")
    assert len(p.keys[0].domain) == 24


def test_variance_of_a_value_beyond_1e17_is_refused():
    """The squared sum adds (2x - (lo + hi))^2 in the engine's 128-bit type: with bounds past 1e17
    a square could overflow on some rows (found on DuckDB by the extreme-values grammar test)."""
    assert "1e17" in refused("SELECT VARIANCE(income * 1000000000000) FROM p")
    assert "1e17" in refused("SELECT STDDEV(age * 1000000000000000.5) FROM p")
    assert plan("SELECT VARIANCE(income * 100000000000) FROM p")      # 5e16: the squares fit
