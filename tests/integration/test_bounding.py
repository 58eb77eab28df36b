"""Contribution bounding on every engine, without noise.

Neighbouring datasets: the same query with and without one person (the analyst's own
`person_id <> x` filter removes exactly that unit's rows before bounding). With the
salt fixed, the bounded, unnoised aggregates may differ in at most L0 groups, each by at
most Linf: the bounds the sensitivity is computed from. Also: the per-unit level keeps at
most max_groups_per_unit groups per person, and rewrites without a salted choice give
the same exact answers on every engine.
"""
from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest
from sqlglot import exp

import dpsql
from dpsql.analysis.measures import Count
from dpsql.rewrite import SALT, to_sql
from tests.conftest import policy_for

SALTS = (1, 987654321, 2**62 + 11)


def _heavy_people(people_db: str) -> list[int]:
    """Worst cases for bounding: the persons with visits in the most states, and with the most visits."""
    from dpsql.engines.duckdb import LOCKED_CONFIG
    con = duckdb.connect(people_db, read_only=True, config=LOCKED_CONFIG)
    try:
        out = []
        for order in ("COUNT(DISTINCT state) DESC, COUNT(*) DESC", "COUNT(*) DESC, COUNT(DISTINCT kind) DESC"):
            out += [r[0] for r in con.execute(f"SELECT person_id FROM visits GROUP BY person_id "
                                              f"ORDER BY {order}, person_id LIMIT 2").fetchall()]
        return out
    finally:
        con.close()


def _exact(session, plan, salt: int) -> dict[tuple, list[Fraction]]:
    """Group key -> bounded measures in value units, straight from the engine."""
    sql = to_sql(plan, session.engine.dialect)
    rows = session.engine.run(sql, {SALT: salt} if plan.group_choice else None).rows
    nk = len(plan.keys)
    return {tuple(r[:nk]): [Fraction(0 if v is None else v) / m.divisor for m, v in zip(plan.measures, r[nk:])]
            for r in rows}


@pytest.fixture
def bounded_conn(target, tmp_path):
    pol = policy_for(tmp_path)
    pol["tables"]["visits"] = dict(pol["tables"]["visits"], max_groups_per_unit=1, max_rows_per_unit=3)
    c = dpsql.connect(target, policy=pol, analyst="alice")
    yield c
    c.close()


@pytest.mark.parametrize("query", [
    "SELECT state, COUNT(*), SUM(cost) FROM visits{where} GROUP BY state",
    "SELECT kind, COUNT(*), AVG(cost) FROM visits{where} GROUP BY kind",
    "SELECT COUNT(*), SUM(cost) FROM visits{where}",
])
def test_one_person_moves_at_most_l0_groups_by_linf(bounded_conn, people_db, query):
    session = bounded_conn.session
    reached = False
    for x in _heavy_people(people_db):
        plan = session.plan(query.format(where=""))
        without = session.plan(query.format(where=f" WHERE person_id <> {x}"))
        assert plan.l0 == 1 and plan.table.max_rows_per_unit == 3
        linf = {n.target: Fraction(n.linf) for n in plan.noise}
        for salt in SALTS:
            a, b = _exact(session, plan, salt), _exact(session, without, salt)
            changed = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
            assert len(changed) <= plan.l0, (x, salt, changed)
            for k in changed:
                zero = [Fraction(0)] * len(plan.measures)
                for m, va, vb in zip(plan.measures, a.get(k, zero), b.get(k, zero)):
                    assert abs(va - vb) <= linf[m.name], (x, salt, k, m.label)
                    reached |= isinstance(m, Count) and abs(va - vb) == 3
    assert reached, "some heavy person should add exactly max_rows_per_unit rows to a count"


def test_per_unit_level_keeps_at_most_max_groups_per_person(bounded_conn):
    """Through the engine: the rewritten inner query, ranked per person, keeps one group
    per person, holding at most max_rows_per_unit rows after the clamp."""
    session = bounded_conn.session
    plan = session.plan("SELECT state, COUNT(*) FROM visits GROUP BY state")
    dialect = session.engine.dialect
    tree = exp.maybe_parse(to_sql(plan, dialect), dialect=dialect)
    inner = tree.find(exp.Subquery).this                                   # the ranked per-unit rows
    count = plan.measures[0].name
    check = (f"SELECT _u, COUNT(*) AS groups, MAX(LEAST({count}, 3)) AS kept, MAX({count}) AS raw "
             f"FROM ({inner.sql(dialect)}) AS t WHERE _rank <= 1 GROUP BY _u")   # the rows pass names the unit _u
    for salt in SALTS:
        rows = session.engine.run(check, {SALT: salt}).rows
        assert len(rows) > 1000
        assert max(r[1] for r in rows) == 1
        assert max(r[2] for r in rows) == 3 < max(r[3] for r in rows)


_DETERMINISTIC = [
    "SELECT COUNT(*) FROM people WHERE age > 40",
    "SELECT state, COUNT(*), SUM(income), AVG(age) FROM people_pk GROUP BY state",
    "SELECT education, SUM(income), AVG(income) FROM people_pk WHERE sex = 'F' AND state NOT LIKE 'C%' "
    "GROUP BY education",
    "SELECT COUNT(*), SUM(age), AVG(income) FROM people WHERE income IS NOT NULL AND education ILIKE '%A%'",
    "SELECT SUM(cost), AVG(cost), COUNT(*) FROM visits WHERE visit_date >= DATE '2024-01-01'",
    "SELECT age, COUNT(*), SUM(income) FROM people_pk WHERE age < 30 GROUP BY age",
]


@pytest.mark.parametrize("query", _DETERMINISTIC)
def test_engines_agree_exactly_without_a_salted_choice(people_db, people_pg, policy, query):
    """No group choice: the rewrite is a function of the data alone, so every engine gives
    the same exact (unnoised) answer."""
    answers = []
    for target in (people_db, people_pg):
        with dpsql.connect(target, policy=policy, analyst="alice") as c:
            plan = c.session.plan(query)
            assert not plan.group_choice
            answers.append(_exact(c.session, plan, 0))
    assert answers[0] == answers[1]
    assert answers[0]


def test_postgres_pk_domain_filter_stays_a_group_filter(people_pg, policy):
    """PostgreSQL moves an aggregate-free HAVING into WHERE (every row then runs the IN list); the
    primary-key shortcut's domain filter carries COUNT(*) > 0 so it is applied to groups only
    (EngineDialect.having_to_where), and the answer is unchanged (the engines agree, above)."""
    import json

    import psycopg
    with dpsql.connect(people_pg, policy=policy, analyst="alice") as c:
        sql = to_sql(c.session.plan("SELECT state, COUNT(*) FROM people_pk GROUP BY state"), "postgres")
    assert "COUNT(*) > 0" in sql
    with psycopg.connect(people_pg) as con:
        plan = con.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def scans(node):
        if "Scan" in node["Node Type"]:
            yield node
        for child in node.get("Plans") or []:
            yield from scans(child)
    found = list(scans(plan[0]["Plan"]))
    assert found and all("Filter" not in s for s in found), found


_UNITS, _GROUPS = 3000, ("a", "b", "c", "d")


@pytest.fixture(scope="module", params=["duckdb", "postgres", "postgres_text_unit"])
def choice_target(request, tmp_path_factory) -> tuple[str, dict, str]:
    """Every unit has one row in each of four groups (text key g, integer key k, the same
    partition); on DuckDB and PostgreSQL, with an integer unit, and on PostgreSQL with a unit of
    a type the record hash does not list (numeric[]: the hash falls back to the row's text)."""
    path = str(tmp_path_factory.mktemp("choice") / "choice.duckdb")
    con = duckdb.connect(path)
    unit = "[uid]" if request.param == "postgres_text_unit" else "uid"
    con.execute(f"CREATE TABLE choice_units AS SELECT {unit} AS uid, g, k, NULLIF(g, 'd') AS h, 1 AS x FROM range({_UNITS}) t(uid), "
                f"(SELECT unnest({list(_GROUPS)}) AS g, unnest(range(1, {len(_GROUPS) + 1})) AS k)")
    con.close()
    policy = {"budget": {"epsilon": 100.0, "delta": 1e-5, "ledger": str(tmp_path_factory.mktemp("ledger") / "l.sqlite"),
                         "accountant": "basic"},
              "defaults": {"epsilon": 1.0},
              "tables": {"choice_units": {"privacy_unit": "uid", "max_rows_per_unit": 1, "max_groups_per_unit": 1,
                                          "columns": {"g": {"values": list(_GROUPS)},
                                                      "k": {"values": list(range(1, len(_GROUPS) + 1))},
                                                      "h": {},
                                                      "x": {"lower": 0, "upper": 1}}}}}
    if request.param == "duckdb":
        yield path, policy, request.param
        return
    server = request.getfixturevalue("postgres_server")
    import os
    from tests.conftest import copy_to_postgres, postgres_database
    with postgres_database(server, f"dpsql_choice_{request.param}") as dsn:
        copy_to_postgres(path, dsn)
        yield dsn, policy, request.param


@pytest.mark.parametrize("query", [
    "SELECT g, COUNT(*) FROM choice_units GROUP BY g",                 # units only (DISTINCT ON, arg_min)
    "SELECT k, SUM(x) FROM choice_units GROUP BY k",                   # the ranked window
    "SELECT g, k, COUNT(*), SUM(x) FROM choice_units GROUP BY g, k",
    "SELECT g, COUNT(*) FROM choice_units WHERE k <> 0 GROUP BY g",    # with the hits flag first
    "SELECT h, SUM(x) FROM choice_units GROUP BY h",                   # a NULL key is one of the four
])
def test_units_choose_their_groups_independently(choice_target, query):
    """The salted hash makes each unit's choice its own draw: with L0 = 1 among four groups, the
    number of units keeping each group is Binomial(n, 1/4) for every salt. A hash that combined
    per-value hashes linearly (PostgreSQL's hash_record_extended alone) would order every unit's
    groups alike up to a rotation, and skew these counts by a large multiple of their spread.
    Each |z| < 5.5: a false failure rate of 4e-8 per count."""
    target, policy, _ = choice_target
    with dpsql.connect(target, policy=policy, analyst="alice") as c:
        plan = c.session.plan(query)
        assert plan.l0 == 1 and plan.group_choice
        sql = to_sql(plan, c.session.engine.dialect).lower()
        if c.session.engine.dialect == "postgres":      # the values' own hashes; the row's text for an unlisted unit type
            assert ("as text), %(salt)s)" in sql) == (choice_target[2] == "postgres_text_unit")
            assert ("hash_record_extended" in sql) == (choice_target[2] == "postgres" and "g, k" in query)
        mean, sd = _UNITS / len(_GROUPS), (_UNITS * (1 / len(_GROUPS)) * (1 - 1 / len(_GROUPS))) ** 0.5
        for salt in SALTS:
            counts = _exact(c.session, plan, salt)
            assert len(counts) == len(_GROUPS), counts
            assert sum(v[0] for v in counts.values()) == _UNITS
            for key, values in counts.items():
                assert abs(float(values[0]) - mean) < 5.5 * sd, (salt, key, values[0], mean, sd)
