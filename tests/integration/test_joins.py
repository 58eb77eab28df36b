"""The SQL analysts write, answered on DuckDB, PostgreSQL and Spark: joins on the unit, joins to
public tables, links, CTEs, FROM-subqueries, per-unit subqueries, semi-joins, BI-tool wrappers.

Each answer is compared with the exact bounded truth, computed by hand-written SQL on the same
data (per person and group: at most max_rows_per_unit rows of the joined relation, at most
max_groups_per_unit groups); the epsilon is so large that the noise is far below the tolerance.
The truth queries are chosen so the group choice cannot matter (every person's rows fall in one
group), so they do not depend on the salt.
"""
from __future__ import annotations

import duckdb
import pytest

import dpsql
from dpsql.rewrite import to_sql
from dpsql.errors import QueryRejected
from tests.conftest import (
    ENGINES,
    SPARK_TARGET,
    copy_to_postgres,
    export_parquet,
    policy_for,
    register_parquet,
)

EPS = 20000.0


@pytest.fixture
def connect(tmp_path):
    """dpsql connections at a huge epsilon, closed after the test whatever happens (an open
    DuckDB connection would hold the file's configuration)."""
    opened = []

    def open_(target, **over):
        pol = policy_for(tmp_path, epsilon=1e9, **over)
        pol["reconstruction"] = {"cache_lifetime": 0}
        c = dpsql.connect(target, policy=pol, analyst="a")
        c.cursor().execute(f"SET dpsql.epsilon = {EPS}")
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


def _truth(people_db: str, sql: str) -> list[tuple]:
    from dpsql.engines.duckdb import (
        LOCKED_CONFIG,  # the configuration dpsql's own connections use
    )
    con = duckdb.connect(people_db, read_only=True, config=dict(LOCKED_CONFIG))
    try:
        return sorted(con.execute(sql).fetchall(), key=lambda r: tuple(str(v) for v in r))
    finally:
        con.close()


def _close(cur, want: list[tuple]) -> None:
    """The released rows against the truth: each noisy value within 10 of its 95% half-widths
    (10 x 3 Laplace scales: a false failure has probability about e^-30 per value)."""
    got = sorted(zip(cur.fetchall(), cur.half_widths), key=lambda r: tuple(str(v) for v in r[0]))
    assert len(got) == len(want), (got, want)
    for (g, hw), w in zip(got, want):
        for a, b, h in zip(g, w, hw):
            if isinstance(b, (int, float)) and not isinstance(b, bool):
                assert a == pytest.approx(float(b), abs=10 * (h or 0.01) + 1e-9 * abs(float(b))), (g, w, hw)
            else:
                assert str(a) == str(b), (g, w)


# (analyst SQL, the bounded truth in DuckDB SQL on the same data)
CASES = {
    "join_on_unit": (
        "SELECT p.sex, COUNT(*) AS n, SUM(v.cost) AS total FROM visits v JOIN people p "
        "ON v.person_id = p.person_id GROUP BY p.sex",
        # visits x people: 5 x 1 joined rows per person and group; sex is one group per person
        "SELECT sex, SUM(LEAST(n, 5)), SUM(GREATEST(LEAST(c, 5 * 2000), 0)) FROM ("
        " SELECT p.person_id, p.sex, COUNT(*) n, SUM(LEAST(GREATEST(v.cost, 0), 2000)) c FROM visits v "
        " JOIN people p ON v.person_id = p.person_id GROUP BY 1, 2) GROUP BY sex"),
    "join_public_key": (
        "SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region",
        "SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region"),
    "left_join_public_null_group": (
        "SELECT r.region, COUNT(*) AS n FROM people p LEFT JOIN regions r ON p.state = r.state GROUP BY r.region",
        "SELECT r.region, COUNT(*) FROM people p LEFT JOIN regions r ON p.state = r.state GROUP BY r.region"),
    "cte_chain": (
        "WITH adults AS (SELECT * FROM people WHERE age >= 18), rich AS (SELECT * FROM adults WHERE income > 50000) "
        "SELECT sex, COUNT(*) AS n FROM rich GROUP BY sex",
        "SELECT sex, COUNT(*) FROM people WHERE age >= 18 AND income > 50000 GROUP BY sex"),
    "from_subquery": (
        "SELECT t.sex, AVG(t.age) AS a FROM (SELECT sex, age FROM people WHERE state = 'CA') AS t GROUP BY t.sex",
        "SELECT sex, AVG(LEAST(GREATEST(age, 0), 120)) FROM people WHERE state = 'CA' GROUP BY sex"),
    "per_unit": (
        "SELECT AVG(n) AS a, SUM(n) AS s FROM (SELECT person_id, COUNT(*) AS n FROM visits "
        "WHERE kind = 'lab' GROUP BY person_id) AS t",
        # per person at most max rows x max groups = 10 rows; only persons with a lab visit
        "SELECT AVG(LEAST(n, 10)), SUM(LEAST(n, 10)) FROM (SELECT person_id, COUNT(*) n FROM visits "
        "WHERE kind = 'lab' GROUP BY person_id)"),
    "per_unit_joined": (
        "SELECT p.sex, SUM(t.c) AS s FROM people p JOIN (SELECT person_id, COUNT(*) AS c FROM visits "
        "GROUP BY person_id) t ON p.person_id = t.person_id GROUP BY p.sex",
        "SELECT p.sex, SUM(LEAST(t.c, 10)) FROM people p JOIN (SELECT person_id, COUNT(*) c FROM visits "
        "GROUP BY person_id) t ON p.person_id = t.person_id GROUP BY p.sex"),
    # a per-unit CTE read twice through identical derived tables: sqlglot makes them one row-level
    # CTE over the per-unit CTE, which is read as that CTE (renamed, filtered) under its alias
    "row_cte_over_per_unit_cte": (
        "WITH w AS (SELECT person_id, COUNT(*) AS c FROM visits WHERE kind = 'lab' GROUP BY person_id), "
        "x AS (SELECT v.person_id AS pid, v.c AS cc FROM (SELECT * FROM w) AS v JOIN w AS w2 "
        "ON v.person_id = w2.person_id WHERE v.c > 1) "
        "SELECT COUNT(*) AS n, SUM(t.cc) AS s FROM x AS t JOIN (SELECT * FROM w) AS u ON t.pid = u.person_id",
        "SELECT COUNT(*), SUM(LEAST(c, 10)) FROM (SELECT person_id, COUNT(*) c FROM visits "
        "WHERE kind = 'lab' GROUP BY person_id) WHERE LEAST(c, 10) > 1"),
    "per_unit_cte_through_renaming_ctes": (
        "WITH w AS (SELECT person_id AS u, SUM(cost) AS total FROM visits GROUP BY person_id), "
        "r (pid, spent) AS (SELECT t.u, t.total FROM w AS t), "
        "big AS (SELECT a.pid, a.spent FROM r AS a WHERE a.spent > 100) "
        "SELECT COUNT(*) AS n, SUM(b1.spent) AS s FROM big AS b1 JOIN big AS b2 ON b1.pid = b2.pid",
        "SELECT COUNT(*), SUM(s) FROM (SELECT person_id, LEAST(GREATEST(SUM(LEAST(GREATEST(cost, 0), 2000)), 0), "
        "10 * 2000) s FROM visits GROUP BY person_id) WHERE s > 100"),
    "semi_join_in": (
        "SELECT sex, COUNT(*) AS n FROM people WHERE person_id IN (SELECT person_id FROM visits WHERE kind = 'lab') "
        "GROUP BY sex",
        "SELECT sex, COUNT(*) FROM people WHERE person_id IN (SELECT person_id FROM visits WHERE kind = 'lab') "
        "GROUP BY sex"),
    "semi_join_not_exists": (
        "SELECT COUNT(*) AS n FROM people p WHERE NOT EXISTS (SELECT 1 FROM visits v WHERE v.person_id = p.person_id "
        "AND v.cost > 1000)",
        "SELECT COUNT(*) FROM people p WHERE NOT EXISTS (SELECT 1 FROM visits v WHERE v.person_id = p.person_id "
        "AND v.cost > 1000)"),
    "superset_wrapper": (
        "SELECT state, n FROM (SELECT state, COUNT(*) AS n FROM people GROUP BY state) AS virtual_table "
        "WHERE n > 170 ORDER BY n DESC LIMIT 1000",
        "SELECT state, COUNT(*) n FROM people GROUP BY state HAVING COUNT(*) > 170"),
    "inner_join_filter_in_on": (
        "SELECT p.sex, COUNT(*) AS n FROM people p JOIN visits v ON v.person_id = p.person_id AND v.cost > 1000 "
        "GROUP BY p.sex",
        "SELECT sex, SUM(LEAST(n, 5)) FROM (SELECT p.person_id, p.sex, COUNT(*) n FROM people p JOIN visits v "
        "ON v.person_id = p.person_id WHERE v.cost > 1000 GROUP BY 1, 2) GROUP BY sex"),
    "left_outer_using": (
        "SELECT COUNT(*) AS n FROM people LEFT OUTER JOIN visits USING (person_id) WHERE person_id > 1000",
        "SELECT SUM(LEAST(n, 5)) FROM (SELECT p.person_id, COUNT(*) n FROM people p LEFT JOIN visits v "
        "ON v.person_id = p.person_id WHERE p.person_id > 1000 GROUP BY 1)"),
    "implicit_names_nested_wrapper": (
        "SELECT * FROM (SELECT t.state, t.count AS c FROM (SELECT state, COUNT(*) FROM people GROUP BY state) t "
        "WHERE t.count > 170 LIMIT 500) AS w ORDER BY c DESC",
        "SELECT state, COUNT(*) FROM people GROUP BY state HAVING COUNT(*) > 170"),
    "metabase_nested_wrapper": (
        'SELECT "source"."state" AS "state", "source"."n" AS "n" FROM (SELECT * FROM (SELECT state, COUNT(*) AS n '
        'FROM people WHERE age > 30 GROUP BY state) AS inner_q) AS "source" LIMIT 1048575',
        "SELECT state, COUNT(*) FROM people WHERE age > 30 GROUP BY state"),
}


@pytest.mark.parametrize("case", CASES)
def test_shapes_answer_the_bounded_truth(target, people_db, connect, case):
    sql, truth = CASES[case]
    cur = connect(target).cursor()
    cur.execute(sql)
    _close(cur, _truth(people_db, truth))


def test_wrapper_is_charged_once_and_keeps_the_column_names(target, connect):
    conn = connect(target)
    cur = conn.cursor()
    cur.execute('SELECT "source"."state" AS "state", "source"."count" AS "count" FROM '
                '(SELECT state, COUNT(*) AS count FROM people GROUP BY state) AS "source" LIMIT 3')
    assert [d[0] for d in cur.description] == ["state", "count"] and len(cur.fetchall()) == 3
    assert conn.session.spending().epsilon_spent == pytest.approx(EPS)


def test_fan_out_does_not_raise_sensitivity(target, connect):
    """A self-join on the unit multiplies a person's rows (n x n); bounding after the join keeps
    each person at max_rows_per_unit of the joined relation (5 x 5 for visits x visits)."""
    conn = connect(target)
    plan = conn.session.plan("SELECT a.kind, COUNT(*) FROM visits a JOIN visits b ON a.person_id = b.person_id "
                             "GROUP BY a.kind")
    assert plan.bounded and plan.rows_per_unit == 25 and plan.l0 == 4
    assert plan.noise[0].linf == 25 and plan.noise[0].l1 == 100
    cur = conn.cursor()
    cur.execute("SELECT a.kind, COUNT(*) FROM visits a JOIN visits b ON a.person_id = b.person_id GROUP BY a.kind")
    assert len(cur.fetchall()) == 4


@pytest.mark.parametrize("sql, reason", [
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.state = p.state", "only on equality of their privacy units"),
    ("SELECT COUNT(*) FROM visits v CROSS JOIN people p", "equi-joins"),
    ("SELECT COUNT(*) FROM people p, visits v", "cross join"),
    ("SELECT COUNT(*) FROM visits v RIGHT JOIN people p ON v.person_id = p.person_id", "NULL-extend"),
    ("SELECT COUNT(*) FROM visits v FULL JOIN people p ON v.person_id = p.person_id", "NULL-extend"),
    ("SELECT COUNT(*) FROM regions r LEFT JOIN people p ON r.state = p.state", "NULL-extend"),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person_id > p.person_id", "must equate a column of each side"),
    ("SELECT COUNT(*) FROM people p LEFT JOIN visits v ON v.person_id = p.person_id AND v.cost > 3",
     "this LEFT JOIN condition"),
    ("SELECT COUNT(*) FROM people p NATURAL JOIN visits v", "NATURAL JOIN"),
    ("SELECT COUNT(*) FROM people p JOIN regions r ON CAST(p.person_id AS TEXT) = r.state", "must equate"),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person_id = p.person_id AND v.visit_id = p.person_id",
     "not declared"),
    ("SELECT v.person_id, COUNT(*) FROM visits v JOIN people p ON v.person_id = p.person_id GROUP BY v.person_id",
     "GROUP BY the privacy unit"),
    ("SELECT COUNT(*) FROM people WHERE age > (SELECT 40)", "subquery in WHERE"),
    ("SELECT COUNT(*) FROM people WHERE state IN (SELECT state FROM visits)", "privacy unit"),
    ("SELECT COUNT(*) FROM people p WHERE EXISTS (SELECT 1 FROM visits v WHERE v.state = p.state)",
     "privacy unit"),
    ("SELECT AVG(n) FROM (SELECT state, COUNT(*) AS n FROM visits GROUP BY state) t",
     "grouped by the privacy unit"),
    ("WITH RECURSIVE r AS (SELECT 1) SELECT COUNT(*) FROM people", "RECURSIVE"),
    ("SELECT COUNT(*) FROM (SELECT COUNT(*) AS c FROM people) t", "grouped by the privacy unit"),
    ("SELECT AVG(c) FROM (SELECT COUNT(*) AS c FROM people GROUP BY person_id) t", "without its unit"),
])
def test_refusals_name_their_reason(target, connect, sql, reason):
    conn = connect(target)
    with pytest.raises(QueryRejected, match=reason):
        conn.cursor().execute(sql)
    assert conn.session.spending().epsilon_spent == 0


# -------------------------------------------------------------------------------------- links

@pytest.fixture(params=ENGINES)
def linked(request, tmp_path):
    """lvisits(visit_id PRIMARY KEY, person_id, cost) and prescriptions(rx_id, visit_id, drug),
    whose unit comes through the link visit_id -> lvisits.visit_id. Person p has p % 4 + 1 visits,
    each with (visit_id % 3) + 1 prescriptions; 50 prescriptions point at no visit."""
    path = str(tmp_path / "linked.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE lvisits (visit_id BIGINT PRIMARY KEY, person_id BIGINT NOT NULL, cost DOUBLE)")
    con.execute("INSERT INTO lvisits SELECT 100 * p + k, p, (p * 7 + k * 13) % 900 FROM range(1, 401) a(p), "
                "range(0, 4) b(k) WHERE k <= p % 4")
    con.execute("CREATE TABLE prescriptions (rx_id BIGINT, visit_id BIGINT, drug VARCHAR NOT NULL)")
    con.execute("INSERT INTO prescriptions SELECT row_number() OVER (), v.visit_id, "
                "CASE (v.visit_id + j) % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'c' END "
                "FROM lvisits v, range(0, 3) c(j) WHERE j <= v.visit_id % 3")
    # prescriptions of no visit (a key with no row to link to): no person's rows
    con.execute("INSERT INTO prescriptions SELECT 100000 + i, 999000 + i % 7, 'a' FROM range(0, 50) t(i)")
    con.close()
    pol = {"budget": {"epsilon": 1e9, "ledger": str(tmp_path / "l.sqlite")},
           "reconstruction": {"cache_lifetime": 0}, "timing": {"quantum": 0, "floor": 0},
           "tables": {"lvisits": {"privacy_unit": "person_id", "max_rows_per_unit": 4,
                                  "columns": {"cost": {"lower": 0, "upper": 1000}}},
                      "prescriptions": {"link": "visit_id -> lvisits.visit_id", "max_rows_per_unit": 6,
                                        "max_groups_per_unit": 3, "columns": {"drug": {"values": ["a", "b", "c"]}}}}}
    target, options = path, {}
    if request.param == "postgres":
        target, options = request.getfixturevalue("people_pg"), {"schema": "linked"}
        copy_to_postgres(path, target, schema="linked")
        request.addfinalizer(lambda: _drop(target, "linked"))
    elif request.param == "spark":
        spark = request.getfixturevalue("spark_session")
        request.getfixturevalue("people_spark")
        files = export_parquet(path, tmp_path / "parquet")
        register_parquet(spark, files)
        target = SPARK_TARGET
        request.addfinalizer(lambda: [spark.sql(f"DROP TABLE IF EXISTS `{t}`") for t in files])
    return request.param, path, target, options, pol


def _drop(dsn: str, schema: str) -> None:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_link_gives_each_row_the_unit_of_the_row_it_points_at(linked):
    engine, path, target, options, pol = linked
    conn = dpsql.connect(target, policy=pol, analyst="a", **options)
    cur = conn.cursor()
    cur.execute(f"SET dpsql.epsilon = {EPS}")
    implicit = "SELECT drug, COUNT(*) AS n FROM prescriptions GROUP BY drug"
    explicit = ("SELECT COUNT(*) AS n FROM prescriptions pr JOIN lvisits v ON pr.visit_id = v.visit_id "
                "WHERE v.cost > 500")
    if engine == "spark":       # no PRIMARY KEY on Spark: a row could belong to several people
        for sql in (implicit, explicit):
            with pytest.raises(QueryRejected, match="does not guarantee lvisits.visit_id is unique"):
                cur.execute(sql)
        conn.close()
        return
    cur.execute(implicit)
    _close(cur, _truth(path, "SELECT drug, SUM(LEAST(n, 6)) FROM (SELECT v.person_id, p.drug, COUNT(*) n "
                                        "FROM prescriptions p JOIN lvisits v USING (visit_id) GROUP BY 1, 2) "
                                        "GROUP BY drug"))
    plan = conn.session.plan(implicit)
    assert plan.rows_per_unit == 6 and plan.l0 == 3                 # the linked table's own limits
    cur.execute(explicit)
    # the join on lvisits' key adds no rows per person: prescriptions' own limit, 6 (not 4 x 6)
    _close(cur, _truth(path, "SELECT SUM(LEAST(n, 6)) FROM (SELECT v.person_id, COUNT(*) n "
                                        "FROM prescriptions p JOIN lvisits v USING (visit_id) WHERE v.cost > 500 "
                                        "GROUP BY 1)"))
    plan = conn.session.plan(explicit)
    assert [j.instance.implicit for j in plan.relation.joins] == [False]   # the written join resolves the link
    conn.close()


def test_a_semi_join_on_a_link_key_reads_the_linked_rows_alone(linked):
    """EXISTS correlated through a link key: the subquery groups the linked rows by the key itself,
    without the join dpsql would add to resolve their unit (the outer query holds the key's one
    target row); the answer is the engine's, orphan rows (keys with no target) included."""
    engine, path, target, options, pol = linked
    if engine == "spark":
        pytest.skip("no PRIMARY KEY on Spark: the link is refused (the test above)")
    conn = dpsql.connect(target, policy=pol, analyst="a", **options)
    cur = conn.cursor()
    cur.execute(f"SET dpsql.epsilon = {EPS}")
    sql = ("SELECT COUNT(*) AS n, SUM(cost) AS s FROM lvisits v WHERE v.cost > 100 AND EXISTS "
           "(SELECT 1 FROM prescriptions p WHERE p.visit_id = v.visit_id AND p.drug = 'a')")
    plan = conn.session.plan(sql)
    inner = to_sql(plan, conn.session.engine.dialect).split("LEFT JOIN (", 1)[1]
    assert " JOIN " not in inner.split(") AS _s", 1)[0], inner       # no link join inside the subquery
    cur.execute(sql)
    _close(cur, _truth(path, "SELECT SUM(LEAST(n, 4)), SUM(LEAST(s, 4000)) FROM (SELECT v.person_id, COUNT(*) n, "
                             "SUM(LEAST(GREATEST(cost, 0), 1000)) s FROM lvisits v WHERE v.cost > 100 AND EXISTS "
                             "(SELECT 1 FROM prescriptions p WHERE p.visit_id = v.visit_id AND p.drug = 'a') "
                             "GROUP BY 1)"))
    conn.close()
