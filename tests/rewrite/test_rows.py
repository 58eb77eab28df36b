"""Pass 1, rows (dpsql/rewrite/rows.py): the relation's policy-filtered rows as flat columns
_u, _g*, _x*, _h; the analyst's WHERE becomes the flag _h, never a filter (and the measure
inputs are computed on the passing rows only)."""
from __future__ import annotations

DOMAIN = "('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')"
QUERY = "SELECT state, SUM(income) FROM people WHERE age > 30 GROUP BY state"


def test_rows_sql(passes):
    plan = passes.plan(QUERY)
    assert passes.sql(plan, "rows") == (
        "SELECT people.person_id AS _u, people.state AS _g0, CASE WHEN (people.age > 30) THEN "
        "CAST(CASE WHEN people.income < 0 THEN 0 WHEN people.income > 500000 THEN 500000 ELSE people.income END"
        " * 1000000 AS BIGINT) END AS _x0, (people.age > 30) AS _h "
        f"FROM people AS people WHERE people.state IN {DOMAIN}")


def test_rows_without_keys_or_measure_inputs(passes):
    assert passes.sql(passes.plan("SELECT COUNT(*) FROM people"), "rows") == \
        "SELECT people.person_id AS _u FROM people AS people"


def test_rows_are_the_relation_rows_with_the_where_as_a_flag(passes):
    sql = passes.sql(passes.plan(QUERY), "rows")
    assert passes.columns(sql) == ["_u", "_g0", "_x0", "_h"]
    got = passes.run(sql)
    want = passes.run(f"SELECT person_id, state, CASE WHEN age > 30 THEN "
                      f"CAST(LEAST(GREATEST(income, 0), 500000) * 1000000 AS BIGINT) END, "
                      f"age > 30 FROM people WHERE state IN {DOMAIN}")
    assert got == want                                # the input only where the WHERE passes
    assert {h for *_, h in got} == {True, False}      # the WHERE filtered nothing: it is the flag


def test_rows_on_other_dialects(passes):
    plan = passes.plan(QUERY)
    assert "(people.age > 30) AS _h" in passes.sql(plan, "rows", "postgres")
    assert "AS _x0" in passes.sql(plan, "rows", "spark")
