"""SET dpsql.topk through the proxy with psycopg 3: SHOW ALL lists it, a top-k answers with the keys
in rank order and fresh values, EXPLAIN DP names the mechanism, an unsupported shape is refused
with its reason (docs/TOPK.md)."""
from __future__ import annotations

import psycopg
import pytest


def test_topk_through_psycopg(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        rows = {r[0]: r[1] for r in c.execute("SHOW ALL").fetchall()}
        assert rows["dpsql.topk"] == "off"
        c.execute("SET dpsql.topk = 'noisy_max'")
        assert c.execute("SHOW dpsql.topk").fetchone() == ("noisy_max",)
        cur = c.execute("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 3")
        got = cur.fetchall()
        assert [d.name for d in cur.description] == ["state", "n"] and len(got) == 3
        assert len({s for s, _ in got}) == 3 and all(isinstance(n, float) for _, n in got)
        facts = [r[0] for r in c.execute("EXPLAIN DP SELECT state FROM people GROUP BY state "
                                         "ORDER BY COUNT(*) DESC LIMIT 2").fetchall()]
        assert any(f.startswith("topk") for f in facts)
        with pytest.raises(psycopg.Error, match="OFFSET"):
            c.execute("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC LIMIT 2 OFFSET 1")
