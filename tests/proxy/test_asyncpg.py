"""asyncpg against the proxy: it describes statements first and sends binary parameters in the
types Describe reports, and takes every result column in binary."""
from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import pytest

from tests.proxy.conftest import PASSWORD


def run(coro):
    return asyncio.run(coro)


async def _connect(proxy, user="alice"):
    return await asyncpg.connect(host="127.0.0.1", port=proxy.port, user=user, password=PASSWORD,
                                 database="test", ssl=False)


def test_fetch(proxy):
    async def main():
        con = await _connect(proxy)
        try:
            rows = await con.fetch("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY state")
            assert [r["state"] for r in rows][:2] == ["CA", "FL"] and isinstance(rows[0]["n"], float)
            budget = await con.fetchrow("SHOW dpsql.budget")
            assert budget["analyst"] == "alice"
        finally:
            await con.close()
    run(main())


def test_fetchval_with_parameters(proxy):
    async def main():
        con = await _connect(proxy)
        try:
            n = await con.fetchval("SELECT COUNT(*) FROM people WHERE age > $1", 30)
            assert isinstance(n, float) and 0 < n < 2500
            n = await con.fetchval("SELECT COUNT(*) FROM people WHERE state = $1 AND income < $2", "CA", 100000.0)
            assert isinstance(n, float)
            n = await con.fetchval("SELECT COUNT(*) FROM visits WHERE visit_date >= $1", dt.date(2020, 1, 1))
            assert isinstance(n, float)
        finally:
            await con.close()
    run(main())


def test_prepared_statement_and_errors(proxy):
    async def main():
        con = await _connect(proxy)
        try:
            st = await con.prepare("SELECT state, COUNT(*) AS n FROM people WHERE age > $1 GROUP BY state")
            assert [a.name for a in st.get_attributes()] == ["state", "n"]
            assert [t.name for t in st.get_parameters()] == ["int4"]
            rows = await st.fetch(25)
            assert len(rows) == 8
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await con.fetch("SELECT * FROM people")
            assert await con.fetchval("SHOW dpsql.epsilon") == 0.5
        finally:
            await con.close()
    run(main())
