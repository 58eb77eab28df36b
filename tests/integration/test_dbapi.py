"""The DB-API module end to end on a real engine: results, settings, budget, errors."""
from __future__ import annotations

import pickle

import duckdb
import pytest

import dpsql
from dpsql.analysis.analyze import PublicQuery


def spent(cur) -> dict:
    cur.execute("SHOW dpsql.budget")
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def raw_connect(path: str):
    """A plain DuckDB connection that can coexist in-process with dpsql's (same config)."""
    from dpsql.engines.duckdb import LOCKED_CONFIG
    return duckdb.connect(path, read_only=True, config=LOCKED_CONFIG)


def truth(people_db: str, sql: str):
    con = raw_connect(people_db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_module_globals():
    assert dpsql.apilevel == "2.0"
    assert dpsql.paramstyle == "qmark"
    assert issubclass(dpsql.QueryRejected, dpsql.ProgrammingError)
    assert issubclass(dpsql.BudgetExhausted, dpsql.OperationalError)
    assert issubclass(dpsql.InvalidSetting, dpsql.DataError)
    assert issubclass(dpsql.PolicyError, dpsql.OperationalError)
    for cls in (dpsql.Error, dpsql.InterfaceError, dpsql.DatabaseError):
        assert issubclass(cls, Exception)


def test_grouped_query_description_and_accuracy(conn, people_db):
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) AS n, AVG(income) FROM people WHERE age > 30 GROUP BY state")
    rows = cur.fetchall()
    assert [d[0] for d in cur.description] == ["state", "n", "avg"]
    assert cur.description[1][1] == dpsql.NUMBER and cur.description[0][1] == dpsql.STRING
    exact = dict(truth(people_db, "SELECT state, COUNT(*) FROM people WHERE age > 30 GROUP BY state"))
    assert sorted(r[0] for r in rows) == sorted(["CA", "FL", "IL", "NY", "OH", "PA", "TX", "WA"])
    acc = cur.accuracy
    assert acc[0] is None and acc[1].mechanism == "laplace" and acc[1].noise_scale > 0
    for (state, n, avg), widths in zip(rows, cur.half_widths):
        # 0.5 split in three parts: scale 6; |noise| < 20 scales fails with probability e^-20
        assert abs(n - exact.get(state, 0)) < 20 * acc[1].noise_scale
        assert 0 <= avg <= 500000
        assert widths[0] is None and widths[1] == pytest.approx(acc[1].ci95) and widths[2] > 0
    assert cur.rowcount == len(rows) == 8
    assert cur.cost.epsilon == 0.5


def test_fetch_variants_and_iteration(conn):
    cur = conn.cursor()
    cur.execute("SELECT education, COUNT(*) FROM people GROUP BY education ORDER BY education")
    first = cur.fetchone()
    two = cur.fetchmany(2)
    rest = cur.fetchall()
    assert [first[0]] + [r[0] for r in two + rest] == sorted(["none", "high_school", "bachelor", "master", "phd"])
    assert cur.fetchone() is None
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert len(list(cur)) == 2


def test_set_show_reset(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.25")
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchone() == (0.25,)
    before = spent(cur)["epsilon_spent"]
    cur.execute("SELECT COUNT(*) FROM people")
    assert spent(cur)["epsilon_spent"] == pytest.approx(before + 0.25)
    cur.execute("SET dpsql.epsilon TO 2")
    cur.execute("RESET dpsql.epsilon")
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchone() == (0.5,)
    cur.execute("SET dpsql.mechanism = 'gaussian'")
    cur.execute("SHOW dpsql.mechanism")
    assert cur.fetchone() == ("gaussian",)
    cur.execute("SELECT COUNT(*) FROM people")
    assert cur.accuracy[0].mechanism == "gaussian"
    assert cur.cost.delta > 0


@pytest.mark.parametrize("stmt, error", [
    ("SET dpsql.epsilon = -1", dpsql.InvalidSetting),
    ("SET dpsql.epsilon = 0", dpsql.InvalidSetting),
    ("SET dpsql.epsilon = 'nan'", dpsql.InvalidSetting),
    ("SET dpsql.epsilon = inf", dpsql.InvalidSetting),
    ("SET dpsql.epsilon = 1e9", dpsql.InvalidSetting),
    ("SET dpsql.epsilon = abc", dpsql.InvalidSetting),
    ("SET dpsql.delta = 2", dpsql.InvalidSetting),
    ("SET dpsql.mechanism = 'uniform'", dpsql.InvalidSetting),
    ("SET dpsql.analyst = 'bob'", dpsql.QueryRejected),
    ("SET dpsql.budget = 1000", dpsql.QueryRejected),
    ("SET threads = 1", dpsql.QueryRejected),
    ("RESET threads", dpsql.QueryRejected),
    ("SHOW tables", dpsql.QueryRejected),
    ("SET dpsql.nonsense = 1", dpsql.InvalidSetting),
])
def test_bad_settings_change_nothing(conn, stmt, error):
    cur = conn.cursor()
    before = spent(cur)
    with pytest.raises(error):
        cur.execute(stmt)
    assert spent(cur) == before
    cur.execute("SHOW dpsql.analyst")
    assert cur.fetchone() == ("alice",)
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchone() == (0.5,)


def test_parameters_are_bound_as_literals(conn):
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people WHERE state = ? AND age > ?", ("CA", 30))
    assert cur.fetchone()[0] > 0
    with pytest.raises(dpsql.QueryRejected):     # text compared with a number: refused
        cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", ("30",))
    with pytest.raises(dpsql.QueryRejected):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", (1, 2))
    with pytest.raises(dpsql.QueryRejected):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > ?")
    cur.execute("SELECT COUNT(*) FROM people WHERE state = :s", {"s": "NY"})
    assert cur.fetchone()[0] > 0


def test_injection_through_parameter_is_a_literal(conn, people_db):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 5")
    cur.execute("SELECT COUNT(*) FROM people WHERE state = ?", ("CA' OR '1'='1",))
    # matches no row: the count is noise around 0 (scale 0.2), not the table size
    assert abs(cur.fetchone()[0]) < 10


def test_budget_exhaustion_releases_nothing(tmp_path, target):
    from tests.conftest import policy_for
    pol = policy_for(tmp_path, epsilon=1.0)
    conn = dpsql.connect(target, policy=pol, analyst="bob")
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.4")
    cur.execute("SELECT COUNT(*) FROM people")
    cur.execute("SELECT COUNT(*) FROM people WHERE age > 1")
    with pytest.raises(dpsql.BudgetExhausted):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 2")
    with pytest.raises(dpsql.InterfaceError):
        cur.fetchall()
    with pytest.raises(dpsql.InvalidSetting):       # more than what is left
        cur.execute("SET dpsql.epsilon = 0.5")
    cur.execute("SET dpsql.epsilon = 0.2")
    cur.execute("SELECT COUNT(*) FROM people")        # exactly what is left
    assert spent(cur)["epsilon_remaining"] == pytest.approx(0.0, abs=1e-12)
    conn.close()


def test_explain_dp_charges_nothing_and_shows_the_split(conn):
    cur = conn.cursor()
    before = spent(cur)
    cur.execute("EXPLAIN DP (WIDE) SELECT kind, SUM(cost), COUNT(*) FROM visits GROUP BY kind")
    rows = {(r[0], r[1]): r for r in cur.fetchall()}
    assert spent(cur) == before
    s = rows[("value", "SUM(cost)")]
    # visits: 5 rows per unit, 2 groups per unit, cost in [0, 2000]: L1 = 2 * 5 * 2000
    assert s[3] == 20000 and s[4] == pytest.approx(0.25) and s[2] == "laplace"
    assert rows[("value", "COUNT(*)")][3] == 10
    assert rows[("charge", "total")][4] == 0.5
    sql = rows[("rewritten_sql", None)][8]
    assert "ROW_NUMBER() OVER (PARTITION BY _u" in sql and "visits.person_id AS _u" in sql
    assert {"duckdb": "$salt", "postgres": "%(salt)s", "spark": ":salt"}[conn.session.engine.dialect] in sql


def test_primary_key_table_skips_preaggregation(conn):
    session = conn.session
    plan = session.plan("SELECT state, SUM(income) FROM people_pk GROUP BY state")
    if session.engine.dialect == "spark":        # Spark has no PRIMARY KEY: always the bounded rewrite
        assert plan.bounded is True and plan.l0 == 1
    else:
        assert plan.bounded is False and plan.l0 == 1
        from dpsql.rewrite import to_sql
        sql = to_sql(plan)
        assert "_per_unit" not in sql and "ROW_NUMBER" not in sql
    assert session.plan("SELECT state, SUM(income) FROM people GROUP BY state").bounded is True
    cur = conn.cursor()
    cur.execute("SELECT state, SUM(income) FROM people_pk GROUP BY state")
    assert len(cur.fetchall()) == 8


def test_public_tables_pass_through_free(conn, people_db):
    cur = conn.cursor()
    before = spent(cur)
    cur.execute("SELECT state, region FROM regions ORDER BY state")
    assert cur.fetchall() == truth(people_db, "SELECT state, region FROM regions ORDER BY state")
    assert cur.cost is None and spent(cur) == before
    assert isinstance(conn.session.plan("SELECT * FROM regions"), PublicQuery)
    for bad in ["SELECT * FROM people_view", "SELECT * FROM read_csv('/etc/passwd')",
                "SELECT getenv('HOME')", "SELECT * FROM regions WHERE state IN (SELECT state FROM people)",
                "SELECT * FROM regions JOIN people USING (state)", "SELECT * FROM no_such_table",
                "SELECT * FROM duckdb_tables()", "SELECT * FROM query('SELECT * FROM people')",
                "SELECT pg_read_file('/etc/passwd')", "SELECT * FROM pg_class", "SELECT * FROM pg_catalog.pg_user",
                "SELECT * FROM information_schema.tables", "SELECT set_config('search_path', 'x', false)",
                "SELECT current_setting('data_directory')", "SELECT * FROM generate_series(1, 3)",
                "SELECT * FROM regions FOR UPDATE", "SELECT * INTO t2 FROM regions"]:
        with pytest.raises(dpsql.QueryRejected):
            cur.execute(bad)
    assert spent(cur) == before


def test_public_domain_releases_empty_groups(tmp_path, target):
    from tests.conftest import policy_for
    pol = policy_for(tmp_path)
    pol["tables"]["people"]["columns"]["state"] = {"values": ["CA", "NY", "ZZ"]}
    conn = dpsql.connect(target, policy=pol, analyst="carol")
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) FROM people GROUP BY state")
    rows = dict(cur.fetchall())
    assert sorted(rows) == ["CA", "NY", "ZZ"]
    assert abs(rows["ZZ"]) < 40        # an empty group, released with noise (scale 2)
    conn.close()


def test_partition_selection_hides_small_groups(conn, people_db):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 1")
    cur.execute("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
    released = {r[0] for r in cur.fetchall()}
    sizes = dict(truth(people_db, "SELECT visit_date, COUNT(DISTINCT person_id) FROM visits GROUP BY 1"))
    # threshold for L0=2, eps=0.5, delta=1e-8: 1 + 4 ln(1e8) = 74.7: no date with a handful of people passes
    assert all(sizes[d] > 20 for d in released)
    assert cur.cost.delta > 0
    cur.execute("EXPLAIN DP SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
    assert any(r[0].startswith("partition_selection") for r in cur.fetchall())


def test_having_order_limit_on_noisy_values(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 2")
    cur.execute("SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > 100 ORDER BY n DESC LIMIT 3")
    rows = cur.fetchall()
    assert len(rows) == 3
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    assert rows[0][0] == "CA"   # CA holds 25% of people, far above the rest at this noise
    cur.execute("SELECT COUNT(*) * 2 AS twice, SUM(age) / COUNT(*) AS mean_age, -COUNT(*) FROM people")
    twice, mean_age, neg = cur.fetchone()
    assert 15 < mean_age < 120 and twice > 0 and neg < 0
    assert cur.half_widths[0][1] > 0


def test_avg_is_clamped_to_bounds_and_near_truth(conn, people_db):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 5")
    cur.execute("SELECT AVG(age) FROM people")
    (avg,) = cur.fetchone()
    (exact,) = truth(people_db, "SELECT AVG(LEAST(age, 120)) FROM people")[0]
    assert abs(avg - exact) < 5


def test_refusal_leaves_connection_usable_and_charges_nothing(conn):
    cur = conn.cursor()
    before = spent(cur)
    for bad in ["SELECT MIN(state) FROM people", "SELECT COUNT(*) FROM people; SELECT 1",
                "DROP TABLE people", "SELEC COUNT(*) FROM people", "", "SELECT COUNT(*) FROM people WHERE nope > 1"]:
        try:
            cur.execute(bad)
        except dpsql.QueryRejected:
            pass
    assert spent(cur) == before
    cur.execute("SELECT COUNT(*) FROM people")
    assert cur.fetchone()[0] > 0


def test_closed_objects_raise_interface_error(target, policy):
    conn = dpsql.connect(target, policy=policy, analyst="dave")
    cur = conn.cursor()
    cur.close()
    with pytest.raises(dpsql.InterfaceError):
        cur.execute("SELECT COUNT(*) FROM people")
    conn.close()
    with pytest.raises(dpsql.InterfaceError):
        conn.cursor()
    conn.close()  # twice is fine


def test_errors_pickle_and_carry_sqlstate():
    err = dpsql.QueryRejected("SELECT *", "it would release individual rows", "hint")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is dpsql.QueryRejected and str(back) == str(err) and back.hint == "hint"
    assert back.sqlstate == "42501"
    assert pickle.loads(pickle.dumps(dpsql.BudgetExhausted("x"))).sqlstate == "53000"


@pytest.mark.parametrize("bad", ["postgresql://x@127.0.0.1:1/db", "postgres://x:pw@127.0.0.1:1/db", "mysql://x",
                                 "spark://x", 42])
def test_bad_targets(bad, policy):
    with pytest.raises(dpsql.InterfaceError) as info:
        dpsql.connect(bad, policy=policy, analyst="a")
    assert "pw" not in str(info.value)


def test_missing_database_file(tmp_path, policy):
    with pytest.raises(dpsql.InterfaceError):
        dpsql.connect(str(tmp_path / "nope.duckdb"), policy=policy, analyst="a")


def test_duckdb_url_and_connection_object(people_db, policy):
    c = dpsql.connect("duckdb:///" + people_db.lstrip("/") if not people_db.startswith("/")
                      else "duckdb:///" + people_db, policy=policy, analyst="erin")
    c.cursor().execute("SELECT COUNT(*) FROM people")
    c.close()
    raw = raw_connect(people_db)
    c = dpsql.connect(raw, policy=policy, analyst="erin")
    c.cursor().execute("SELECT COUNT(*) FROM people")
    c.close()
    raw.execute("SELECT 1")   # the owner's connection stays open
    raw.close()


def test_engine_is_locked_down(conn):
    eng = conn.session.engine
    with pytest.raises(dpsql.EngineError) as info:
        eng.run("SELECT * FROM read_csv('/etc/passwd')")
    assert "passwd" not in str(info.value)       # engine messages stay in the log
    for write in ["CREATE TABLE zz AS SELECT 1 AS a", "INSERT INTO regions VALUES ('ZZ', 'x')",
                  "SELECT 1; DROP TABLE regions"]:
        with pytest.raises(dpsql.EngineError):
            eng.run(write)
    assert "zz" not in eng.base_tables() and len(eng.run("SELECT * FROM regions").rows) == 3


@pytest.mark.parametrize("table", ["people", "people_pk"])
def test_sum_and_avg_of_a_double_column_near_the_clipped_truth(conn, people_db, table):
    """The scaled-integer path (DOUBLE income, scale 10^6) returns value units."""
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 9")
    cur.execute(f"SELECT SUM(income), AVG(income), COUNT(*) FROM {table} WHERE age > 20")
    total, avg, n = cur.fetchone()
    exact_sum, exact_avg = truth(people_db, f"SELECT SUM(LEAST(income, 500000)), AVG(LEAST(income, 500000)) "
                                            f"FROM {table} WHERE age > 20")[0]
    # four noisy parts, eps 2.25 each: SUM noise scale 500000/2.25, AVG's centered sum
    # 250000/2.25 over more than 1500 people; 20 noise scales bound a false failure by e^-20
    assert n > 1500
    assert abs(total - exact_sum) < 20 * 500000 / 2.25
    assert abs(avg - exact_avg) < 20 * 250000 / 2.25 / 1500 + 1


def test_negated_predicates_keep_their_negation(conn, people_db):
    """NOT LIKE, NOT ILIKE, NOT IN, NOT BETWEEN, IS NOT NULL reach the engine negated."""
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 9")
    where = ("state NOT LIKE 'C%' AND sex NOT ILIKE 'f' AND education NOT IN ('phd') "
             "AND age NOT BETWEEN 0 AND 25 AND income IS NOT NULL")
    cur.execute(f"SELECT COUNT(*) FROM people WHERE {where}")
    (noisy,) = cur.fetchone()
    (exact,) = truth(people_db, f"SELECT COUNT(*) FROM people WHERE {where}")[0]
    assert abs(noisy - exact) < 20 / 9          # Laplace scale 1/9: e^-20 false failure


def test_having_is_not_null_keeps_its_negation(conn):
    """PostgreSQL's parser marks IS NOT NULL as a negated IS: HAVING must keep the NOT."""
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex HAVING n IS NOT NULL")
    assert sorted(r[0] for r in cur.fetchall()) == ["F", "M"]
    cur.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex HAVING n IS NULL")
    assert cur.fetchall() == []


def test_explain_dp_shows_subset_selection(conn):
    cur = conn.cursor()
    before = spent(cur)
    cur.execute("EXPLAIN DP (WIDE) SELECT COUNT(*) FROM people WHERE person_id IN (4, 8, 15) AND age > 30")
    rows = {r[0]: r for r in cur.fetchall()}
    assert rows["subset_selection"][1] == "flagged"
    assert "in_list of 3 values" in rows["subset_selection"][8] and "age > 30" in rows["subset_selection"][8]
    cur.execute("EXPLAIN DP (WIDE) SELECT COUNT(*) FROM people WHERE age > 30")
    rows = {r[0]: r for r in cur.fetchall()}
    assert rows["subset_selection"][1] == "none"
    assert spent(cur) == before
