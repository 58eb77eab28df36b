"""The rewrite on a real engine: specialised shapes agree with the general one, and the
exact-integer clamps hold at awkward bounds."""
from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest

import dpsql
from dpsql.rewrite import GENERAL, SALT, rewrite
from dpsql.session import Session
from tests.conftest import ENGINES, SPARK_TARGET, copy_to_postgres, export_parquet


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _run(session: Session, tree, salt: int) -> list[tuple]:
    dialect = session.engine.dialect
    sql = tree.sql(dialect, comments=False)
    rows = session.engine.run(sql, {"salt": salt} if SALT in sql else None).rows
    return sorted(rows, key=lambda r: tuple(str(v) for v in r))


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM people",
    "SELECT state, COUNT(*) FROM people WHERE age > 40 GROUP BY state",
    "SELECT education, COUNT(*) AS a, COUNT(*) AS b FROM people GROUP BY education",
])
@pytest.mark.parametrize("salt", [1, 12345, 2**62 + 7])
def test_units_only_shape_equals_the_general_rewrite(conn, sql, salt):
    session = conn.session
    plan = session.plan(sql)
    assert plan.units_only
    dialect = session.engine.dialect
    special = rewrite(plan, dialect)                    # COUNT(DISTINCT), ARG_MIN / MIN_BY / DISTINCT ON
    general = rewrite(plan, dialect, GENERAL)
    assert special.sql(dialect) != general.sql(dialect)
    assert _run(session, special, salt) == _run(session, general, salt)


@pytest.mark.parametrize("engine", ENGINES)
def test_exact_clamps_hold_at_a_bound_doubles_cannot_scale_exactly(tmp_path, engine, request):
    # 9007199254.796875 * 1e6 is not a double: the engine's cast may round up past the bound.
    hi = 9007199254.796875
    path = str(tmp_path / "edge.duckdb")
    con = duckdb.connect(path)
    con.execute(f"CREATE TABLE t AS SELECT i AS id, {hi}::DOUBLE AS x FROM range(1, 101) r(i)")
    con.close()
    target, options = path, {}
    if engine == "postgres":
        target, options = request.getfixturevalue("people_pg"), {"schema": "edge"}
        copy_to_postgres(path, target, schema="edge")
        request.addfinalizer(lambda: _drop_schema(target, "edge"))
    table = {"privacy_unit": "id", "columns": {"x": {"lower": 0, "upper": hi}}}
    if engine == "spark":       # the table as a Parquet file, read through the policy's source
        request.getfixturevalue("spark_session")
        target, table["source"] = SPARK_TARGET, export_parquet(path, tmp_path / "parquet")["t"]
        table["types"] = {"id": "BIGINT", "x": "DOUBLE"}
    pol = {"budget": {"epsilon": 100.0, "ledger": str(tmp_path / "l.sqlite")}, "tables": {"t": table}}
    conn = dpsql.connect(target, policy=pol, analyst="a", **options)
    session = conn.session
    plan = session.plan("SELECT SUM(x) FROM t")
    m = plan.measures[0]
    rows = _run(session, rewrite(plan, session.engine.dialect, GENERAL), 1)
    total = Fraction(rows[0][0]) / m.divisor
    assert total <= 100 * m.hi                 # each row within the (outward) bound the sensitivity uses
    assert m.hi >= Fraction(hi)
    conn.close()
