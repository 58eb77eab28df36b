"""Pass-level fixtures (tests/rewrite/test_<pass>.py), as sqlglot's optimizer tests its rules: a plan
from the demo data's DuckDB engine (its facts decide the shortcuts), the SQL after a prefix of the
passes (`rewrite(plan, passes=PASSES[:k])`), and that SQL run on a copy of the data.
"""
from __future__ import annotations

import shutil

import duckdb
import pytest

from dpsql.rewrite import PASSES, rewrite
from tests.conftest import policy_for

SALT = 1234567          # any fixed salt: the tests compare runs with the same one


class Passes:
    """Plans on the demo data, the rewrite after each pass, and a DuckDB connection to a copy."""

    def __init__(self, conn, db: duckdb.DuckDBPyConnection):
        self.conn, self.db = conn, db

    def plan(self, sql: str):
        return self.conn.session.plan(sql, cached=False)

    def tree(self, plan, last: str, dialect: str = "duckdb"):
        """The tree after the passes up to and including the one named `last`."""
        names = [p.__name__ for p in PASSES]
        return rewrite(plan, dialect, passes=PASSES[: names.index(last) + 1])

    def sql(self, plan, last: str, dialect: str = "duckdb") -> str:
        return self.tree(plan, last, dialect).sql(dialect)

    def run(self, sql: str, salt: int = SALT) -> list[tuple]:
        params = {"salt": salt} if "$salt" in sql else None
        return sorted(self.db.execute(sql, params).fetchall(), key=repr)

    def columns(self, sql: str) -> list[str]:
        params = {"salt": SALT} if "$salt" in sql else None
        return [c[0] for c in self.db.execute(sql, params).description]


@pytest.fixture(scope="module")
def passes(people_db, tmp_path_factory):
    import dpsql
    tmp = tmp_path_factory.mktemp("passes")
    copy = shutil.copy(people_db, tmp / "people.duckdb")
    conn = dpsql.connect(people_db, policy=policy_for(tmp), analyst="alice")
    db = duckdb.connect(str(copy), read_only=True)
    yield Passes(conn, db)
    db.close()
    conn.close()
