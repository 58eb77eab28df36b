"""Pass 5, keys_as_text (dpsql/rewrite/keys.py): every group key comes back as text, _k<i>."""
from __future__ import annotations


def test_keys_become_text(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    totals = passes.sql(plan, "totals")
    assert totals.startswith("SELECT _g0, ")
    assert passes.sql(plan, "keys_as_text") == "SELECT CAST(_g0 AS TEXT) AS _k0, " + totals[len("SELECT _g0, "):]


def test_two_keys_and_a_date(passes):
    plan = passes.plan("SELECT visit_date, kind, COUNT(*) FROM visits GROUP BY visit_date, kind")
    sql = passes.sql(plan, "keys_as_text")
    assert sql.startswith("SELECT CAST(_g0 AS TEXT) AS _k0, CAST(_g1 AS TEXT) AS _k1, ")
    typed = passes.run(passes.sql(plan, "totals"))
    text = passes.run(sql)
    assert sorted(text, key=repr) == sorted(((str(d), k, *rest) for d, k, *rest in typed), key=repr)
    assert all(isinstance(d, str) and isinstance(k, str) for d, k, *_ in text)


def test_keys_on_other_dialects(passes):
    plan = passes.plan("SELECT kind, SUM(cost) FROM visits GROUP BY kind")
    assert passes.sql(plan, "keys_as_text", "postgres").startswith("SELECT CAST(_g0 AS TEXT) AS _k0, ")
    assert passes.sql(plan, "keys_as_text", "spark").startswith("SELECT CAST(_g0 AS STRING) AS _k0, ")
