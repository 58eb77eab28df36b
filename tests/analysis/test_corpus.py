"""The query corpus (tests/corpus/{accept,reject}/*.sql) against the grammar and the checker.

Each file holds one statement after its header lines:
  -- title: what the query shows
  -- expect: a substring of the QueryRejected message        (reject files)
  -- xfail: why the checker currently accepts it              (known checker gaps)

* every accept file is in the subset (grammar + side conditions) and the checker accepts it,
  and it runs through the DB-API on DuckDB (the test policy's tables: people, staff_raw,
  visits, notes linked to visits, and the public regions; see people_duckdb);
* every reject file is outside the subset and the checker refuses it with QueryRejected
  naming the construct;
* end to end through dpsql.connect on a DuckDB file: every reject file raises QueryRejected,
  charges nothing, leaves the connection usable, and no data value appears in the message.

The parametrization (one test per file) is made by pytest_generate_tests in conftest.py.
"""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from lark.exceptions import LarkError

import dpsql
from dpsql.analysis.parse import classify
from dpsql.analysis.plan import QueryPlan
from dpsql.errors import QueryRejected

SECRET = "ZZSECRET"            # a data value that must never appear in a refusal
PRESENT, ABSENT = 42, 4_242_424  # a person in the table, and one who is not


def _subset_problem(parser, conditions, sql: str) -> str | None:
    """Why the grammar refuses `sql` (a parse error or a side condition), or None."""
    try:
        tree = parser.parse(sql, start="start")
    except LarkError as err:
        return f"parse error: {type(err).__name__}"
    return conditions(tree)


# ----------------------------------------------------------------------------- corpus shape

def test_corpus_sizes():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "corpus"
    assert len(list((root / "accept").glob("*.sql"))) >= 50
    assert len(list((root / "reject").glob("*.sql"))) >= 75


def test_accept_file_headers(accept_case):
    name, headers, sql = accept_case
    assert headers.get("title"), f"{name}: no -- title: header"
    assert sql and ";" not in sql.rstrip().rstrip(";"), f"{name}: one statement per file"


def test_reject_file_headers(reject_file):
    name, headers, sql = reject_file
    assert headers.get("title") and headers.get("expect"), f"{name}: needs -- title: and -- expect:"


# ----------------------------------------------------------------------------- grammar and checker

def test_accepted_by_grammar_and_checker(accept_case, parser, conditions, checker):
    name, _, sql = accept_case
    assert _subset_problem(parser, conditions, sql) is None, name
    assert isinstance(checker(sql), QueryPlan), name


def test_refused_by_grammar_and_checker(reject_case, parser, conditions, checker, engineless_session):
    name, headers, sql = reject_case
    assert _subset_problem(parser, conditions, sql) is not None, f"{name}: the grammar accepts it"
    with pytest.raises(QueryRejected) as info:
        if classify(sql).kind in ("query", "explain"):
            checker(sql)
        else:                                  # a dpsql command (SET ...): the session refuses it
            engineless_session.execute(sql)
    assert headers["expect"] in str(info.value), f"{name}: {info.value}"


# ----------------------------------------------------------------------------- end to end (DuckDB)

@pytest.fixture(scope="module")
def people_duckdb(tmp_path_factory, regions) -> str:
    path = str(tmp_path_factory.mktemp("corpus") / "people.duckdb")
    con = duckdb.connect(path)
    con.execute("""CREATE TABLE people (person_id BIGINT, age INTEGER, income DOUBLE, state VARCHAR,
                   city VARCHAR, household INTEGER, visit_date DATE, name VARCHAR, born DATE, seen TIMESTAMP,
                   logged TIMESTAMP)""")
    rows = []
    cities = ["Springfield", "San Jose", "Austin", "Albany", SECRET]
    for i in range(1, 301):
        rows.append((i, 18 + i % 70, float(1000 * (i % 97)), ["CA", "NY", "TX"][i % 3], cities[i % 5],
                     1 + i % 5, dt.date(2022, 1, 1) + dt.timedelta(days=i), f"{SECRET}-{i}",
                     dt.date(1930, 1, 1) + dt.timedelta(days=97 * i), dt.datetime(2023, 1, 1, 8) + dt.timedelta(hours=53 * i),
                     dt.datetime(2020, 1, 1) + dt.timedelta(minutes=7919 * i)))
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.execute("CREATE VIEW people_view AS SELECT * FROM people")
    con.execute("CREATE TABLE staff_raw (person_id BIGINT, salary DOUBLE)")
    con.execute(f"INSERT INTO staff_raw VALUES ({PRESENT}, 123456.0)")
    # visits (several per person, the key visit_id unique), notes linked to visits, and the
    # public table regions
    con.execute("""CREATE TABLE visits (visit_id BIGINT PRIMARY KEY, person_id BIGINT, cost DOUBLE,
                   kind VARCHAR, clinic VARCHAR, ward INTEGER, visited DATE)""")
    visits = [(v, 1 + (v * 7) % 300, float(v % 900), ["lab", "exam", "consult"][v % 3],
               ["North", "South", SECRET][v % 3], 1 + v % 4, dt.date(2023, 1, 1) + dt.timedelta(days=v % 365))
              for v in range(1, 901)]
    con.executemany("INSERT INTO visits VALUES (?, ?, ?, ?, ?, ?, ?)", visits)
    con.execute("""CREATE TABLE notes (note_id BIGINT PRIMARY KEY, visit_id BIGINT, words INTEGER,
                   topic VARCHAR, written DATE)""")
    notes = [(n, 1 + (n * 11) % 900, n % 400, ["diet", "sleep", "pain"][n % 3],
              dt.date(2023, 6, 1) + dt.timedelta(days=n % 100)) for n in range(1, 601)]
    con.executemany("INSERT INTO notes VALUES (?, ?, ?, ?, ?)", notes)
    con.execute("CREATE TABLE regions (state VARCHAR, region VARCHAR)")
    con.executemany("INSERT INTO regions VALUES (?, ?)", list(regions))
    con.close()
    return path


@pytest.fixture
def connection(people_duckdb, tmp_path, make_corpus_policy):
    conn = dpsql.connect(people_duckdb, policy=make_corpus_policy(tmp_path / "ledger.sqlite"), analyst="a")
    yield conn
    conn.close()


def _spent(conn) -> float:
    cur = conn.cursor()
    cur.execute("SHOW dpsql.budget")
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))["epsilon_spent"]


def test_refused_end_to_end(reject_case, connection):
    name, headers, sql = reject_case
    cur = connection.cursor()
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute(sql)
    err = info.value
    assert isinstance(err, QueryRejected), f"{name}: {type(err).__name__}: {err}"
    assert headers["expect"] in str(err), f"{name}: {err}"
    for text in (str(err), err.hint or "", repr(err)):
        assert SECRET not in text and "Springfield" not in text, f"{name}: a data value in the message"
    assert _spent(connection) == 0, f"{name}: budget was charged"
    cur.execute("SELECT COUNT(*) FROM people")      # the connection is still usable
    assert len(cur.fetchall()) == 1
    assert _spent(connection) > 0


def test_accepted_end_to_end(accept_case, connection):
    name, _, sql = accept_case
    cur = connection.cursor()
    cur.execute(sql)
    cur.fetchall()
    assert cur.description, name


# ----------------------------------------------------------------------------- error oracles
# Row-dependent errors would be an oracle: the same query about a person who is in the
# table and one who is not must end the same way (these were once accepted and failed
# only when a row reached the test).

@pytest.mark.parametrize("test", [
    "city IS TRUE",                                    # text cast to BOOLEAN
    "visit_date IS FALSE",                             # date cast to BOOLEAN
    "visit_date > DATE '2020-W01-1'",                  # Python reads the date, DuckDB does not
    "visit_date > DATE '20200101'",
    "age = 0.0000000000000000000000000000000000001",  # INTEGER cast to DECIMAL(38,37)
    "DATE '2020-W01-1' = DATE '2020-01-01'",           # failing constants are not folded
    "0.0000000000000000000000000000000000001 = 100",
])
def test_no_error_oracle(test, people_duckdb, tmp_path, make_corpus_policy):
    outcomes = []
    for who in (PRESENT, ABSENT):
        conn = dpsql.connect(people_duckdb, policy=make_corpus_policy(tmp_path / f"ledger{who}.sqlite"), analyst="a")
        try:
            conn.cursor().execute(f"SELECT COUNT(*) FROM people WHERE person_id = {who} AND {test}")
            outcomes.append("released")
        except dpsql.Error as err:
            outcomes.append(type(err).__name__)
        finally:
            conn.close()
    assert outcomes[0] == outcomes[1] == "QueryRejected", outcomes
