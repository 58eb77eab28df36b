"""Every golden rewrite runs on its engine with the test data (tests/golden/<dialect>/)."""
from __future__ import annotations

import pytest

from dpsql.rewrite import SALT
from tests.rewrite.test_golden import GOLDEN, _split


def _goldens():
    for path in sorted(GOLDEN.glob("*/*.sql")):
        marks = [pytest.mark.spark] if path.parent.name == "spark" else []
        yield pytest.param(path, id=f"{path.parent.name}/{path.stem}", marks=marks)


@pytest.mark.parametrize("path", list(_goldens()))
def test_golden_rewrite_runs_on_its_engine(path, people_db, request):
    dialect = path.parent.name
    if dialect == "postgres":
        from dpsql.engines.postgres import PostgresEngine
        engine = PostgresEngine(request.getfixturevalue("people_pg"))
        placeholder = f"%({SALT})s"
    elif dialect == "spark":
        from dpsql.engines.spark import SparkEngine
        engine = SparkEngine(request.getfixturevalue("people_spark"))
        placeholder = f":{SALT}"
    else:
        from dpsql.engines.duckdb import DuckDBEngine
        engine = DuckDBEngine(people_db)
        placeholder = f"${SALT}"
    _, _, sql = _split(path.read_text())
    try:
        for salt in (1, 2**63 - 1):
            rows = engine.run(sql, {SALT: salt} if placeholder in sql else None)
            assert rows.rows, f"{path.name}: no groups"
            assert all(v is not None for r in rows.rows for v in r[sum(c.startswith("_k") for c in rows.columns):])
    finally:
        engine.close()
