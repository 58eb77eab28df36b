"""Accuracy through the proxy with real clients (psycopg 3 and psql): SET dpsql.intervals and
dpsql.round, the suppression note in the NOTICE, EXPLAIN DP one fact per row, COPY (query) TO
STDOUT, SHOW ALL (issue 16)."""
from __future__ import annotations

import csv
import io

import psycopg
import pytest

from tests.proxy.test_psql import PSQL, psql


def _notices(conn) -> list[str]:
    got: list[str] = []
    conn.add_notice_handler(lambda d: got.append(d.message_primary))
    return got


def test_intervals_and_round_through_psycopg(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        c.execute("SET dpsql.intervals = on")
        c.execute("SET dpsql.round TO on")
        assert c.execute("SHOW dpsql.intervals").fetchone() == ("on",)
        cur = c.execute("SELECT state, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY state ORDER BY state")
        assert [d.name for d in cur.description] == ["state", "n", "n_low", "n_high", "a", "a_low", "a_high"]
        for _, n, lo, hi, a, alo, ahi in cur.fetchall():
            assert isinstance(n, int) and isinstance(lo, int) and 0 <= lo <= n <= hi
            assert alo < a < ahi
        # with parameters (the extended protocol's Describe of a statement)
        cur = c.execute("SELECT COUNT(*) AS n FROM people WHERE age > %s", [200])
        assert [d.name for d in cur.description] == ["n", "n_low", "n_high"]
        n, lo, hi = cur.fetchone()
        assert isinstance(n, int) and n >= 0 and lo >= 0
        c.execute("RESET dpsql.round")
        n = c.execute("SELECT COUNT(*) AS n FROM people").fetchone()[0]
        assert isinstance(n, float)


def test_notice_says_groups_may_be_suppressed_without_a_number(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        notes = _notices(c)
        c.execute("SELECT state, COUNT(*) FROM people GROUP BY state").fetchall()
        assert notes and "suppressed" not in notes[-1]
        c.execute("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date").fetchall()
        assert "partition selection may have suppressed groups" in notes[-1]
        assert not any(ch.isdigit() for ch in notes[-1].split("partition selection", 1)[1])


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_round_shows_no_negative_zero(proxy):
    r = psql(proxy, "SET dpsql.round = on",
             *["SELECT COUNT(*) AS n, SUM(age) AS s FROM people WHERE age > 200"] * 4)
    assert r.returncode == 0, r.stderr
    assert "-0 " not in r.stdout and "-0\n" not in r.stdout and "-0.0" not in r.stdout
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 2 and cells[0].lstrip("-").isdigit():
            assert int(cells[0]) >= 0


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_intervals(proxy):
    r = psql(proxy, "SET dpsql.intervals = on", "SELECT COUNT(*) AS n FROM people")
    assert r.returncode == 0, r.stderr
    assert "n_low" in r.stdout and "n_high" in r.stdout


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_explain_dp_is_one_fact_per_row(proxy):
    r = psql(proxy, "EXPLAIN DP SELECT state, COUNT(*), AVG(age) FROM people GROUP BY state")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split("|")[0].strip() == "fact" and lines[0].split("|")[1].strip() == "value"
    assert max(len(line) for line in lines) < 250          # the old single row was ~800 wide
    assert " rewritten_sql " in r.stdout and " value: COUNT(*) " in r.stdout and " charge: total " in r.stdout
    assert "|   FROM (" in r.stdout or "| FROM (" in r.stdout     # the SQL over several rows
    r = psql(proxy, "EXPLAIN DP (SQL) SELECT COUNT(*) FROM people")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].strip() == "rewritten_sql" and "\n SELECT\n" in r.stdout


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_copy_of_a_private_aggregate(proxy, tmp_path):
    r = psql(proxy, "SET dpsql.round = on",
             "\\copy (SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY state) TO STDOUT WITH CSV HEADER")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout.split("SET\n", 1)[1])))
    assert rows[0] == ["state", "n"] and len(rows) == 9
    assert [s for s, _ in rows[1:]] == ["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"]
    assert all(n.isdigit() for _, n in rows[1:])
    assert "epsilon charged" in r.stderr                       # the NOTICE comes with it
    out = tmp_path / "n.tsv"
    r = psql(proxy, f"\\copy (SELECT COUNT(*) AS n, AVG(age) AS a FROM people) TO '{out}'")
    assert r.returncode == 0, r.stderr
    n, a = out.read_text().rstrip("\n").split("\t")
    assert float(n) > 1000 and 0 < float(a) < 120
    r = psql(proxy, "\\copy people TO STDOUT")
    assert r.returncode == 1 and "only COPY (query) TO STDOUT" in r.stderr
    r = psql(proxy, "\\copy (SELECT * FROM people) TO STDOUT")
    assert r.returncode == 1 and "42501" in r.stderr


def test_psycopg_copy_out(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        with c.cursor() as cur:
            with cur.copy("COPY (SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY state) TO STDOUT") as cp:
                rows = list(cp.rows())
            assert [r[0] for r in rows] == ["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"]
            assert all(float(r[1]) > 0 for r in rows)
            with pytest.raises(psycopg.errors.FeatureNotSupported), cur.copy("COPY people FROM STDIN") as cp:
                cp.write_row(("x",))
        spent = c.execute("SHOW dpsql.budget").fetchone()
        assert spent[1] > 0                                       # the COPY's query was charged


def test_show_all_lists_dpsql_settings(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        c.execute("SET dpsql.intervals = on")
        cur = c.execute("SHOW ALL")
        assert [d.name for d in cur.description] == ["name", "setting", "description"]
        rows = {name: (value, desc) for name, value, desc in cur.fetchall()}
    assert rows["dpsql.intervals"][0] == "on" and "95% interval" in rows["dpsql.intervals"][1]
    assert rows["dpsql.round"][0] == "off" and rows["dpsql.mechanism"][0] == "laplace"
    assert rows["dpsql.analyst"][0] == "alice"
    assert rows["DateStyle"][0] == "ISO, MDY" and all(desc for _, desc in rows.values())


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_show_all(proxy):
    r = psql(proxy, "SHOW ALL")
    assert r.returncode == 0, r.stderr
    assert " dpsql.intervals " in r.stdout and " dpsql.round " in r.stdout and "description" in r.stdout
