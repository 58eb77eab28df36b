"""The proxy under zCDP accounting: each private query's NOTICE says the rho charged and what is
left, SHOW dpsql.budget has the rho columns, EXPLAIN DP the counts (psycopg 3)."""
from __future__ import annotations

import psycopg
import pytest

from tests.proxy.conftest import start_proxy


@pytest.fixture(scope="module")
def zproxy(people_db, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zproxy")
    budget = {"epsilon": 10.0, "delta": 1e-6, "ledger": str(tmp / "ledger.sqlite"), "accountant": "zcdp"}
    defaults = {"epsilon": 0.5, "delta": 1e-8, "mechanism": "gaussian", "rho": 0.05}
    p = start_proxy(people_db, tmp, policy={"budget": budget, "defaults": defaults})
    yield p
    p.server.stop()
    p.backend.close()


def test_notice_budget_and_explain_under_zcdp(zproxy):
    notices: list[str] = []
    with psycopg.connect(zproxy.dsn("alice"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute("SELECT COUNT(*) FROM people").fetchall()
        assert len(notices) == 1
        assert notices[0].startswith("rho charged 0.05 (this query alone: epsilon ")
        assert "remaining rho 1.489 of 1.539 (epsilon " in notices[0] and "of 10 spent at delta 1e-06)" in notices[0]
        cur = c.execute("SHOW dpsql.budget")
        row = dict(zip([d.name for d in cur.description], cur.fetchone()))
        assert row["accountant"] == "zcdp" and row["rho_spent"] == pytest.approx(0.05, rel=1e-6)
        assert row["rho_remaining"] == pytest.approx(1.489, abs=1e-3)
        cur = c.execute("EXPLAIN DP (WIDE) SELECT AVG(age) FROM people")
        rows = [dict(zip([d.name for d in cur.description], r)) for r in cur.fetchall()]
        left = {r["aggregate"]: r["queries"] for r in rows if r["item"] == "budget_left"}
        assert left["zcdp"] == 29 and left["basic"] > 0      # rho 0.05 each: 29 more in the 1.489 left
