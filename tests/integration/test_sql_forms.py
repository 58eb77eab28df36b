"""SQL as TPC-H, BI tools and analysts write it, answered on DuckDB and PostgreSQL with the same
guarantees as its plain form: schema-qualified names, comma joins with their conditions in WHERE,
constant date arithmetic. Each answer at a huge epsilon is compared with the engine's own answer
to the bounded query (tests/integration/test_joins.py's _truth and _close); each refusal names the
construct as written.

The database has, beside the usual tables, a schema `other` holding a table `people` of its own
(ten rows): a name the protected table shares, which dpsql must neither read as the protected
table nor as a public one.
"""
from __future__ import annotations

import duckdb
import pytest

from dpsql.errors import QueryRejected
from tests.conftest import copy_to_postgres, make_people_db, postgres_database
from tests.integration.test_joins import EPS, _close, _truth, connect  # noqa: F401  (connect: a fixture)


@pytest.fixture(scope="module")
def forms_db(tmp_path_factory) -> str:
    path = make_people_db(str(tmp_path_factory.mktemp("forms") / "people.duckdb"))
    con = duckdb.connect(path)
    con.execute("CREATE SCHEMA other")
    con.execute("CREATE TABLE other.people AS SELECT * FROM main.people ORDER BY person_id LIMIT 10")
    con.execute("CREATE TABLE other.regions AS SELECT * FROM main.regions")
    con.close()
    return path


@pytest.fixture(scope="module")
def forms_pg(request, forms_db) -> str:
    server = request.getfixturevalue("postgres_server")
    import psycopg
    with postgres_database(server, "dpsql_forms") as dsn:
        copy_to_postgres(forms_db, dsn)
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute("CREATE SCHEMA IF NOT EXISTS other")
            con.execute("DROP TABLE IF EXISTS other.people")
            con.execute("CREATE TABLE other.people AS SELECT * FROM public.people ORDER BY person_id LIMIT 10")
            con.execute("DROP TABLE IF EXISTS other.regions")
            con.execute("CREATE TABLE other.regions AS SELECT * FROM public.regions")
        yield dsn


@pytest.fixture(params=["duckdb", "postgres"])
def engine(request, forms_db):
    """(engine name, target, the schema plain names are read from, the database's name)."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("forms_pg")
        from urllib.parse import urlsplit
        return "postgres", dsn, "public", urlsplit(dsn).path.lstrip("/")    # postgres_database adds the pid
    return "duckdb", forms_db, "main", "people"


# ------------------------------------------------------------------------ schema-qualified names

QUALIFIED = {
    # {s}: the engine's schema, {c}: its database (catalog)
    "schema_table": (
        "SELECT sex, COUNT(*) AS n FROM {s}.people GROUP BY sex",
        "SELECT sex, COUNT(*) FROM people GROUP BY sex"),
    "metabase_quoted": (
        'SELECT "{s}"."people"."sex" AS "sex", COUNT(*) AS "count", AVG("{s}"."people"."age") AS "avg" '
        'FROM "{s}"."people" GROUP BY "{s}"."people"."sex" ORDER BY "{s}"."people"."sex" ASC',
        "SELECT sex, COUNT(*), AVG(LEAST(GREATEST(age, 0), 120)) FROM people GROUP BY sex"),
    "catalog_schema_table": (
        "SELECT COUNT(*) AS n FROM {c}.{s}.people p WHERE p.age >= 40",
        "SELECT COUNT(*) FROM people WHERE age >= 40"),
    "joined_and_public": (
        "SELECT r.region, COUNT(*) AS n, SUM(v.cost) AS total FROM {s}.visits v JOIN {s}.people p "
        "ON v.person_id = p.person_id JOIN {s}.regions r ON p.state = r.state GROUP BY r.region",
        "SELECT region, SUM(LEAST(n, 5)), SUM(LEAST(c, 5 * 2000)) FROM ("
        " SELECT p.person_id, r.region, COUNT(*) n, SUM(LEAST(GREATEST(v.cost, 0), 2000)) c FROM visits v "
        " JOIN people p ON v.person_id = p.person_id JOIN regions r ON p.state = r.state GROUP BY 1, 2) AS x "
        "GROUP BY region"),
}


@pytest.mark.parametrize("case", QUALIFIED)
def test_qualified_names_answer_as_the_plain_names(engine, connect, case):
    _, target, schema, catalog = engine
    sql, truth = QUALIFIED[case]
    cur = connect(target).cursor()
    cur.execute(sql.format(s=schema, c=catalog))
    want = _truth_on(engine, truth)
    _close(cur, want)


def _truth_on(engine, sql: str) -> list[tuple]:
    """The bounded truth on the engine itself (its own answer to the plain query)."""
    name, target, _, _ = engine
    if name == "duckdb":
        return _truth(target, sql)
    import psycopg
    with psycopg.connect(target) as con:
        rows = con.execute(sql).fetchall()
    return sorted([tuple(float(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, int) else v
                         for v in r) for r in rows], key=lambda r: tuple(str(v) for v in r))


def test_a_qualified_public_table_is_the_public_table(engine, connect):
    _, target, schema, _ = engine
    cur = connect(target).cursor()
    cur.execute(f"SELECT region FROM {schema}.regions ORDER BY region")
    assert cur.fetchall() == [tuple(r) for r in _truth_on(engine, "SELECT region FROM regions ORDER BY region")]


@pytest.mark.parametrize("sql, construct", [
    ("SELECT COUNT(*) FROM other.people", "other.people"),               # a table sharing the protected name
    ('SELECT COUNT(*) FROM "other"."people"', '"other"."people"'),
    ("SELECT COUNT(*) FROM other.regions", "other.regions"),             # nor is it the public table
    ("SELECT COUNT(*) FROM people p JOIN other.people q ON p.person_id = q.person_id", "other.people"),
    ("SELECT COUNT(*) FROM nosuchdb.{s}.people", "nosuchdb.{s}.people"),
    ("SELECT COUNT(*) FROM pg_temp.people", "pg_temp.people"),
    ("WITH people2 AS (SELECT * FROM people) SELECT COUNT(*) FROM {s}.people2", "{s}.people2"),
    ("SELECT COUNT(*) FROM people WHERE person_id IN (SELECT person_id FROM other.people)", "other.people"),
])
def test_other_schemas_fail_closed(engine, connect, sql, construct):
    _, target, schema, _ = engine
    conn = connect(target)
    with pytest.raises(QueryRejected) as err:
        conn.cursor().execute(sql.format(s=schema))
    assert f"the qualified table name {construct.format(s=schema)}" in str(err.value)
    assert "plainly" in (err.value.hint or "")
    assert conn.session.spending().epsilon_spent == 0


# ------------------------------------------------------------------------ comma joins

COMMA = {
    # TPC-H's form: the tables listed, the join equalities among the WHERE's conditions
    "tpch_three_tables": (
        "SELECT r.region, COUNT(*) AS n, SUM(v.cost) AS total FROM people p, visits v, regions r "
        "WHERE p.person_id = v.person_id AND v.cost > 100 AND p.state = r.state GROUP BY r.region",
        "SELECT region, SUM(LEAST(n, 5)), SUM(LEAST(c, 5 * 2000)) FROM ("
        " SELECT p.person_id, r.region, COUNT(*) n, SUM(LEAST(GREATEST(v.cost, 0), 2000)) c FROM visits v "
        " JOIN people p ON v.person_id = p.person_id JOIN regions r ON p.state = r.state WHERE v.cost > 100 "
        " GROUP BY 1, 2) AS x GROUP BY region"),
    # the equality written before the item it joins, and reversed
    "order_of_conditions": (
        "SELECT p.sex, COUNT(*) AS n FROM regions r, people p WHERE r.state = p.state AND p.age >= 30 "
        "GROUP BY p.sex",
        "SELECT p.sex, COUNT(*) FROM people p JOIN regions r ON p.state = r.state WHERE p.age >= 30 GROUP BY p.sex"),
    "qualified_and_comma": (
        "SELECT COUNT(*) AS n FROM {s}.visits v, {s}.people p WHERE v.person_id = p.person_id AND p.sex = 'F'",
        "SELECT SUM(LEAST(n, 5)) FROM (SELECT p.person_id, COUNT(*) n FROM visits v JOIN people p "
        "ON v.person_id = p.person_id WHERE p.sex = 'F' GROUP BY 1) AS x"),
}


@pytest.mark.parametrize("case", COMMA)
def test_comma_joins_answer_as_explicit_joins(engine, connect, case):
    _, target, schema, _ = engine
    sql, truth = COMMA[case]
    cur = connect(target).cursor()
    cur.execute(sql.format(s=schema))
    _close(cur, _truth_on(engine, truth))


def test_a_comma_join_is_planned_as_the_explicit_join(engine, connect):
    """The same relation, bounds and noise as JOIN ... ON: the plan's facts are equal."""
    conn = connect(engine[1])
    a = conn.session.plan("SELECT COUNT(*) FROM people p, visits v WHERE p.person_id = v.person_id AND v.cost > 3")
    b = conn.session.plan("SELECT COUNT(*) FROM people p JOIN visits v ON p.person_id = v.person_id WHERE v.cost > 3")
    assert (a.rows_per_unit, a.l0, a.noise, a.bounded) == (b.rows_per_unit, b.l0, b.noise, b.bounded)
    assert a.relation.joins[0].on.sql() == b.relation.joins[0].on.sql()


@pytest.mark.parametrize("sql, construct", [
    ("SELECT COUNT(*) FROM people p, visits v", "the comma join of 'v' with no equality joining it"),
    ("SELECT COUNT(*) FROM people p, visits v WHERE p.age > 30", "the comma join of 'v'"),
    ("SELECT COUNT(*) FROM people p, visits v WHERE p.person_id = v.person_id OR p.age > 30", "the comma join of 'v'"),
    ("SELECT COUNT(*) FROM people p, visits v JOIN regions r ON r.state = 'CA' WHERE p.person_id = v.person_id",
     "a comma-separated FROM list beside JOIN"),
    ("SELECT COUNT(*) FROM people p, visits v WHERE p.age = v.cost", "privacy units"),
])
def test_cross_joins_stay_refused(engine, connect, sql, construct):
    conn = connect(engine[1])
    with pytest.raises(QueryRejected) as err:
        conn.cursor().execute(sql)
    assert construct in str(err.value)
    assert conn.session.spending().epsilon_spent == 0


# ------------------------------------------------------------------------ constant date arithmetic

DATES = {
    # TPC-H Q1's and Q6's forms; the truth is the engine's own answer to the unfolded query
    "minus_days": "SELECT COUNT(*) AS n, SUM(cost) AS s FROM visits "
                  "WHERE visit_date <= DATE '2024-12-01' - INTERVAL '90' DAY",
    "plus_year": "SELECT COUNT(*) AS n FROM visits WHERE visit_date >= DATE '2023-03-01' "
                 "AND visit_date < DATE '2023-03-01' + INTERVAL '1' YEAR",
    "month_end_clamp": "SELECT COUNT(*) AS n FROM visits WHERE visit_date >= DATE '2024-01-31' "
                       "AND visit_date < DATE '2024-01-31' + INTERVAL '1' MONTH",
    "chain_and_text_units": "SELECT COUNT(*) AS n FROM visits WHERE visit_date BETWEEN DATE '2023-05-31' "
                            "+ INTERVAL '3 months' AND DATE '2023-05-31' + INTERVAL '1 year 2 months' - INTERVAL '1' DAY",
    "plus_integer_days": "SELECT COUNT(*) AS n FROM visits WHERE visit_date < CAST('2023-06-30' AS DATE) + 45",
}


@pytest.mark.parametrize("case", DATES)
def test_date_arithmetic_answers_as_the_engine_computes_it(engine, connect, case):
    sql = DATES[case]
    bounded = ("SELECT SUM(LEAST(n, 5)), SUM(LEAST(c, 5 * 2000)) FROM (SELECT person_id, COUNT(*) n, "
               "SUM(LEAST(GREATEST(cost, 0), 2000)) c FROM visits WHERE {w} GROUP BY 1) AS x"
               if case == "minus_days" else
               "SELECT SUM(LEAST(n, 5)) FROM (SELECT person_id, COUNT(*) n FROM visits WHERE {w} GROUP BY 1) AS x")
    where = sql.split(" WHERE ", 1)[1].split(" GROUP BY")[0]
    cur = connect(engine[1]).cursor()
    cur.execute(sql)
    _close(cur, _truth_on(engine, bounded.format(w=where)))


def test_folding_is_postgresql_calendar_arithmetic(request):
    """shift_date against PostgreSQL's own date +- interval, over month ends, leap days and signs."""
    import datetime as dt
    import itertools

    import psycopg

    from dpsql.analysis.folding import shift_date
    server = request.getfixturevalue("postgres_server")
    days = [dt.date(2000, 2, 29), dt.date(2001, 1, 31), dt.date(1999, 12, 31), dt.date(2024, 3, 31),
            dt.date(1900, 2, 28), dt.date(2023, 5, 15), dt.date(1, 1, 31), dt.date(9998, 11, 30)]
    shifts = [(m, d) for m, d in itertools.product([-25, -13, -12, -1, 0, 1, 11, 12, 13, 48], [-400, -29, -1, 0, 1, 30])]
    cases = [(day, m, d) for day in days for m, d in shifts]
    sql = "SELECT (x.d + make_interval(months => x.m, days => x.n))::date::text FROM (VALUES " + ", ".join(
        f"(DATE '{day.isoformat()}', {m}, {d}, {i})" for i, (day, m, d) in enumerate(cases)) + ") AS x(d, m, n, i) ORDER BY x.i"
    with psycopg.connect(server) as con:
        want = [r[0] for r in con.execute(sql).fetchall()]
    got = []
    for day, m, d in cases:
        try:
            got.append(shift_date(day, m, d))
        except (OverflowError, ValueError):
            got.append(None)
    # equal where shift_date answers; it refuses (and the query is refused) only where the months or
    # the days step leaves the years 1-9999 (the cases at years 1 and 9998)
    assert [g.isoformat() if g is not None else None for g in got] == \
        [w if g is not None else None for g, w in zip(got, want)]
    assert all(day.year in (1, 9998) for (day, _, _), g in zip(cases, got) if g is None)
    assert sum(g is None for g in got) < len(cases) // 4


@pytest.mark.parametrize("sql, construct", [
    ("SELECT COUNT(*) FROM visits WHERE visit_date + INTERVAL '1' DAY < DATE '2024-01-01'",
     "the date arithmetic visit_date + INTERVAL"),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < DATE '2024-01-01' + INTERVAL '1' HOUR", "the date arithmetic"),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < DATE '2024-01-01' + INTERVAL '90'", "the date arithmetic"),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < DATE '2024-01-01' + INTERVAL '1' WEEK", 'at or near "WEEK"'),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < DATE '9999-12-31' + INTERVAL '1' DAY", "outside the years"),
])
def test_other_date_arithmetic_is_refused(engine, connect, sql, construct):
    conn = connect(engine[1])
    with pytest.raises(QueryRejected) as err:
        conn.cursor().execute(sql)
    assert construct in str(err.value)
    assert conn.session.spending().epsilon_spent == 0
