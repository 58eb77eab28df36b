"""dpsql.datagen: shapes, ranges and determinism of the synthetic tables."""
from __future__ import annotations

import duckdb
import pytest

from dpsql import datagen
from dpsql.policy import load_policy

N = 1000


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    datagen.generate(con, N)
    yield con
    con.close()


def one(con: duckdb.DuckDBPyConnection, sql: str):
    return con.execute(sql).fetchone()


def test_schema(con):
    def columns(table):
        return con.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()

    assert columns("people") == [
        ("person_id", "BIGINT", "NO"), ("age", "INTEGER", "YES"), ("income", "DOUBLE", "YES"),
        ("state", "VARCHAR", "YES"), ("sex", "VARCHAR", "YES"), ("education", "VARCHAR", "YES")]
    assert columns("visits") == [
        ("visit_id", "BIGINT", "YES"), ("person_id", "BIGINT", "NO"), ("visit_date", "DATE", "YES"),
        ("state", "VARCHAR", "YES"), ("cost", "DOUBLE", "YES"), ("kind", "VARCHAR", "YES")]
    assert one(con, "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'people' "
                    "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')") == (0,)


def test_people_rows_and_ranges(con):
    assert one(con, "SELECT count(*), count(DISTINCT person_id), min(person_id), max(person_id) "
                    "FROM people") == (N, N, 1, N)
    lo, hi, median = one(con, "SELECT min(age), max(age), median(age) FROM people")
    assert 18 <= lo and hi <= 95 and 35 <= median <= 55
    assert one(con, "SELECT count(*) FROM people WHERE age < 40")[0] > one(
        con, "SELECT count(*) FROM people WHERE age >= 60")[0]            # skewed young
    lo, median, nulls = one(con, "SELECT min(income), median(income), count(*) - count(income) FROM people")
    assert lo == 0 and 20_000 < median < 100_000 and nulls == 0
    states = dict(con.execute("SELECT state, count(*) FROM people GROUP BY state").fetchall())
    assert set(states) == {s for s, _ in datagen.STATES}
    assert states["CA"] > 2 * states["WA"]                                # uneven
    assert {r[0] for r in con.execute("SELECT DISTINCT sex FROM people").fetchall()} == {"F", "M"}
    assert {r[0] for r in con.execute("SELECT DISTINCT education FROM people").fetchall()} == {
        "none", "high_school", "bachelor", "master", "phd"}


def test_income_follows_education(con):
    medians = dict(con.execute("SELECT education, median(income) FROM people GROUP BY 1").fetchall())
    assert medians["none"] < medians["high_school"] < medians["bachelor"] < medians["phd"]


def test_visits_rows_and_ranges(con):
    n, people, ids, lo_id = one(con, "SELECT count(*), count(DISTINCT person_id), count(DISTINCT visit_id), "
                                     "min(person_id) FROM visits")
    assert 2.5 * N < n < 3.5 * N and ids == n and lo_id >= 1
    assert one(con, "SELECT count(*) FROM visits LEFT JOIN people USING (person_id) "
                    "WHERE people.age IS NULL") == (0,)
    lo, hi, over = one(con, "SELECT min(cost), max(cost), count_if(cost > 2000) FROM visits")
    assert 0 <= lo and hi <= 5000 and over > 0
    first, last = one(con, "SELECT min(visit_date), max(visit_date) FROM visits")
    assert str(first) >= "2023-01-01" and str(last) <= "2024-12-31"
    assert {r[0] for r in con.execute("SELECT DISTINCT kind FROM visits").fetchall()} == {
        "checkup", "emergency", "specialist", "lab"}
    assert {r[0] for r in con.execute("SELECT DISTINCT state FROM visits").fetchall()} <= {
        s for s, _ in datagen.STATES}
    home = one(con, "SELECT avg(CASE WHEN v.state = p.state THEN 1 ELSE 0 END) "
                    "FROM visits v JOIN people p USING (person_id)")[0]
    assert 0.8 < home < 1


def test_visit_counts_have_zeros_and_a_tail(con):
    counts = dict(con.execute(
        "SELECT n, count(*) FROM (SELECT count(v.person_id) AS n FROM people p "
        "LEFT JOIN visits v USING (person_id) GROUP BY p.person_id) GROUP BY n").fetchall())
    assert counts.get(0, 0) > 0
    assert sum(c for n, c in counts.items() if n > 5) > 0
    assert max(counts) <= datagen.MAX_VISITS


@pytest.mark.parametrize("mean", [0.0, 1.0, 3.0, 8.0])
def test_visits_per_person_sets_the_mean(mean):
    con = duckdb.connect()
    datagen.generate(con, 20_000, visits_per_person=mean)
    per_person = one(con, "SELECT count(*) / 20000 FROM visits")[0]
    assert per_person == pytest.approx(mean, abs=0.1)


def test_same_seed_same_tables_other_seed_differs(con):
    other = duckdb.connect()
    other.execute("SET threads = 1")                      # thread count must not matter either
    datagen.generate(other, N)
    for table in ("people", "visits"):
        rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
        other.execute(f"CREATE TABLE first_{table} AS SELECT * FROM {table}")
        assert rows == other.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
    datagen.generate(other, N)                            # regenerating replaces, same rows
    for table in ("people", "visits"):
        assert one(other, f"SELECT count(*) FROM ((SELECT * FROM {table} EXCEPT ALL SELECT * FROM first_{table}) "
                          f"UNION ALL (SELECT * FROM first_{table} EXCEPT ALL SELECT * FROM {table}))") == (0,)
    datagen.generate(other, N, seed=1)
    for table, key in (("people", "person_id"), ("visits", "visit_id")):
        differing = one(other, f"SELECT count(*) FROM (SELECT * EXCLUDE ({key}) FROM {table} "
                               f"EXCEPT SELECT * EXCLUDE ({key}) FROM first_{table})")[0]
        assert differing > 0.9 * one(other, f"SELECT count(*) FROM {table}")[0]
    other.close()


def test_income_tail_above_the_bound():
    con = duckdb.connect()
    datagen.generate(con, 100_000)
    above, bulk = one(con, "SELECT count_if(income > 500000), quantile_cont(income, 0.99) FROM people")
    assert 0 < above < 1000 and bulk < 500_000


def test_primary_key_copy():
    con = duckdb.connect()
    datagen.generate(con, N, primary_key_copy=True)
    assert con.execute("SELECT constraint_type, constraint_column_names FROM duckdb_constraints() "
                       "WHERE table_name = 'people_pk' AND constraint_type = 'PRIMARY KEY'").fetchall() == [
        ("PRIMARY KEY", ["person_id"])]
    assert one(con, "SELECT count(*) FROM (SELECT * FROM people EXCEPT SELECT * FROM people_pk)") == (0,)
    assert one(con, "SELECT count(*) FROM people_pk") == (N,)
    with pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO people_pk SELECT * FROM people LIMIT 1")
    datagen.generate(con, N)                              # without the copy: a stale one is dropped
    assert one(con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'people_pk'") == (0,)


def test_zero_people_and_bad_arguments():
    con = duckdb.connect()
    datagen.generate(con, 0)
    assert one(con, "SELECT (SELECT count(*) FROM people), (SELECT count(*) FROM visits)") == (0, 0)
    for kwargs in ({"people": -1}, {"people": 1.5}, {"people": 10, "visits_per_person": -1},
                   {"people": 10, "visits_per_person": 12}):
        with pytest.raises(ValueError):
            datagen.generate(con, **kwargs)


def test_demo_policy_loads_and_matches_the_tables(con):
    policy = load_policy(datagen.demo_policy("ledger.sqlite"))
    assert policy.budget.ledger.name == "ledger.sqlite"
    assert policy.table("people").max_rows_per_unit == 1
    assert policy.table("visits").max_rows_per_unit == 5
    assert policy.table("visits").max_groups_per_unit == 2

    def table_columns(name):
        rows = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = ?", [name]).fetchall()
        if not rows:
            raise KeyError(name)
        return dict(rows)

    policy.check_schema(table_columns)
    for table, column in (("people", "state"), ("people", "sex"), ("people", "education"),
                          ("visits", "state"), ("visits", "kind")):
        present = {r[0] for r in con.execute(f"SELECT DISTINCT {column} FROM {table}").fetchall()}
        assert present <= set(policy.table(table).column(column).values)
