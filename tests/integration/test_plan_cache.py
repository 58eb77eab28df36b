"""A session keeps its recent plans: the same text, parameters, settings and schema give the same
plan without parsing, analysing or rewriting again; anything else plans afresh."""
from __future__ import annotations

import dpsql
from tests.conftest import policy_for


def test_plans_are_kept_per_text_parameters_settings_and_schema(people_db, tmp_path):
    conn = dpsql.connect(people_db, policy=policy_for(tmp_path), analyst="a")
    s = conn.session
    q = "SELECT state, COUNT(*) FROM people WHERE age > 30 GROUP BY state"
    p1 = s.plan(q)
    assert s.plan(q) is p1                                   # kept
    assert s.plan(q, cached=False) is not p1                 # afresh when asked
    assert s.plan(q, cached=False) == p1 or s.plan(q, cached=False).text == p1.text
    s.execute("SET dpsql.epsilon = 0.3")
    p2 = s.plan(q)
    assert p2 is not p1 and p2.cost.epsilon == 0.3           # settings are part of what a plan means
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", [30])
    cur.execute("SELECT COUNT(*) FROM people WHERE age > ?", [40])
    assert len({id(v[1]) for v in s._plans.values()}) == len(s._plans)   # one plan per parameter set
    s._refresh_schema()                                       # a re-read schema: every plan is made again
    assert s.plan(q) is not p2
    public = "SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region"
    assert s.plan(public) is not s.plan(public)              # it reads a public table's values: never kept
    conn.close()


def test_a_backends_sessions_share_plans_per_analyst(people_db, tmp_path, monkeypatch):
    """The proxy's sessions (one per connection) share one cache: an analyst's second connection
    reuses the plan the first made, without parsing the text again; another analyst never gets it."""
    from dpsql import session as session_mod
    from dpsql.backend import Backend
    pol = policy_for(tmp_path)
    pol["reconstruction"] = {"cache_lifetime": 0}          # every run charged: no repeated answers
    backend = Backend(people_db, pol)
    a1, a2, b = backend.session("a"), backend.session("a"), backend.session("b")
    q = "SELECT COUNT(*) FROM people WHERE age > 30"
    try:
        a1.execute(q)
        p = a1.plan(q)
        assert a2.plan(q) is p                                   # shared between a's connections
        assert b.plan(q) is not p                                # never across analysts
        assert a2._mechanisms(p) is a1._mechanisms(p)            # built once per plan (immutable)
        assert a2._sql(p) is a1._sql(p)
        parsed = []
        real = session_mod.classify
        monkeypatch.setattr(session_mod, "classify", lambda *a, **k: parsed.append(a[0]) or real(*a, **k))
        r = a2.execute(q)
        assert parsed == [] and not r.cached and r.cost.epsilon > 0              # planned before: charged, not parsed
        a2.execute("SET dpsql.epsilon = 0.25")
        assert a2.plan(q) is not p and a2.plan(q).cost.epsilon == 0.25    # settings are in the key
        assert a1.plan(q) is p
    finally:
        for s in (a1, a2, b):
            s.close()
        backend.close()
