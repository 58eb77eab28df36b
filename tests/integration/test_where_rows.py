"""[timing] where = "rows": the analyst's WHERE as a fenced row filter (dpsql.rewrite.rows.fenced).

The placement changes the engine's work, never the answer: for every shape, the rewritten SQL
under "rows" returns exactly the rows of the default ("aggregate") on the engine, with the same
salt. The fence is checked on the engine's own plan: every row of the table is read and nothing
of the WHERE reaches the scan, whatever the constant. The policy refuses "rows" without a
release floor, the defence its run-time argument rests on (docs/PRIVACY.md)."""
from __future__ import annotations

import dataclasses
import re

import pytest

import dpsql
from dpsql.errors import PolicyError
from dpsql.rewrite import SALT, to_sql
from tests.conftest import policy_for

QUERIES = [
    "SELECT kind, COUNT(*), SUM(cost) FROM visits WHERE cost > 100 GROUP BY kind",
    "SELECT state, AVG(cost), COUNT(*) FROM visits WHERE kind = 'lab' AND cost < 500 GROUP BY state",
    "SELECT COUNT(*), SUM(income), AVG(age) FROM people WHERE age > 40",
    "SELECT state, SUM(income) FROM people_pk WHERE age > 30 GROUP BY state",
    "SELECT COUNT(DISTINCT person_id) FROM visits WHERE cost > 300",
    "SELECT kind, COUNT(DISTINCT state) FROM visits WHERE cost > 50 GROUP BY kind",
    "SELECT kind, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY cost) FROM visits WHERE state <> 'CA' GROUP BY kind",
    "SELECT COUNT(*) FROM people p WHERE p.age > 30 AND EXISTS "
    "(SELECT 1 FROM visits v WHERE v.person_id = p.person_id AND v.cost > 500)",
    "SELECT state, COUNT(*) FROM visits WHERE cost > 100 GROUP BY state HAVING COUNT(*) > 10",
    "SELECT state, VARIANCE(income) FROM people WHERE sex = 'F' GROUP BY state",
]
SHORTCUTS = {QUERIES[3], QUERIES[4], QUERIES[7]}   # the primary-key and units-only rewrites


@pytest.fixture
def conn(target, tmp_path):
    c = dpsql.connect(target, policy=policy_for(tmp_path), analyst="alice")
    yield c
    c.close()


@pytest.mark.parametrize("query", QUERIES)
def test_rows_placement_gives_the_default_placements_rows(conn, query):
    session = conn.session
    dialect = session.engine.dialect
    plan = session.plan(query, cached=False)
    assert plan.where is not None and not plan.where_rows
    rows_plan = dataclasses.replace(plan, where_rows=True)
    default, fenced = to_sql(plan, dialect), to_sql(rows_plan, dialect)
    if dialect == "spark":
        assert fenced == default                 # no fence there: the default placement stays
        return
    if dialect == "duckdb":
        assert "RANDOM() >= 0" in fenced
    elif query not in SHORTCUTS:                 # PostgreSQL fences the general rewrite's rows only
        assert "OFFSET 0) AS _all WHERE _h" in fenced
    else:
        assert fenced == default
    for salt in (1, 2**62 + 11):
        params = {SALT: salt} if "salt" in default else None
        want = _normal(session.engine.run(default, params).rows)
        got = _normal(session.engine.run(fenced, params).rows)
        assert got == want, query


def _normal(rows) -> list[tuple]:
    """Rows in a fixed order; a quantile histogram ('bin:count,...', concatenated in whatever
    order the engine's hash table gives) as its sorted items."""
    def cell(v):
        return tuple(sorted(v.split(","))) if isinstance(v, str) and ":" in v else v
    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)


def test_the_policy_sets_it_and_requires_a_release_floor(target, tmp_path):
    pol = policy_for(tmp_path)
    pol["timing"] = {"where": "rows", "floor": 0.01, "quantum": 0}
    c = dpsql.connect(target, policy=pol, analyst="alice")
    try:
        assert c.session.plan(QUERIES[0], cached=False).where_rows
        assert not c.session.plan("SELECT COUNT(*) FROM people", cached=False).where_rows   # no WHERE
        cur = c.cursor()
        cur.execute(QUERIES[0])
        assert len(cur.fetchall()) == 4                  # the four kinds of the public domain
    finally:
        c.close()
    for bad, says in (({"where": "rows", "floor": 0}, "floor above 0"),
                      ({"where": "filter"}, '"aggregate" .the default. or "rows"')):
        pol["timing"] = bad
        with pytest.raises(PolicyError, match=says):
            dpsql.connect(target, policy=pol, analyst="alice")


def test_the_fence_reads_every_row_whatever_the_constant(tmp_path):
    """DuckDB: income > X with X above every stored value is decided from the statistics alone in
    a plain WHERE (an empty result, no row read); fenced, the scan reads every row and carries no
    filter of the analyst's, for X above, at and below the largest value."""
    import duckdb
    path = str(tmp_path / "p.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE patients AS SELECT i AS pid, (i // 2)::DOUBLE AS income FROM range(100000) t(i)")
    con.close()
    pol = {"budget": {"epsilon": 10.0, "ledger": str(tmp_path / "l.sqlite")},
           "timing": {"where": "rows"},
           "tables": {"patients": {"privacy_unit": "pid", "columns": {"income": {"lower": 0, "upper": 100000}}}}}
    c = dpsql.connect(path, policy=pol, analyst="m")
    engine = c.session.engine._con                 # the engine's own connection (same configuration)
    try:
        top = 49999
        plain = "\n".join(r[1] for r in engine.execute(
            f"EXPLAIN SELECT COUNT(*) FROM patients WHERE income > {top + 0.5}").fetchall())
        assert "EMPTY_RESULT" in plain.upper().replace(" ", "_")
        for x in (top + 0.5, top, top - 0.5, -1):
            sql = to_sql(c.session.plan(f"SELECT COUNT(*), SUM(income) FROM patients WHERE income > {x}"))
            profile = engine.execute("EXPLAIN ANALYZE " + sql).fetchall()[0][1]
            assert "EMPTY_RESULT" not in profile.upper().replace(" ", "_")
            scan = profile[profile.rindex("Table Scan") if "Table Scan" in profile else profile.rindex("Seq Scan"):]
            assert "Filters:" not in scan, scan                 # nothing of the WHERE in the scan
            assert re.search(r"\b100,000 rows", scan), scan     # every row read
    finally:
        c.close()
