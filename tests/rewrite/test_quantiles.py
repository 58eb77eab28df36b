"""Pass 9, quantiles (dpsql/rewrite/quantiles.py): each quantile input's histogram over 1024 bins,
bounded per unit (m rows in L0 groups), as 'bin:count,...' text joined on the keys."""
from __future__ import annotations

BINS = 1024


def _histogram(text: str) -> dict[int, int]:
    return {int(b): int(c) for b, c in (pair.split(":") for pair in text.split(","))}


def test_histogram_sql(passes):
    plan = passes.plan("SELECT MEDIAN(age) FROM people")
    sql = passes.sql(plan, "quantiles")
    assert sql.startswith("SELECT _q0._qh0 FROM (SELECT LISTAGG(CAST(_b AS TEXT) || ':' || CAST(_c AS TEXT), ',') AS _qh0")
    assert ("CAST(FLOOR((CAST(CASE WHEN people.age < 0 THEN 0 WHEN people.age > 120 THEN 120 ELSE people.age END AS DOUBLE)"
            " - CAST(0 AS DOUBLE)) / CAST(120 AS DOUBLE) * 1024) AS BIGINT) AS _bin") in sql
    assert f"CASE WHEN _bin < 0 THEN 0 WHEN _bin > {BINS - 1} THEN {BINS - 1} ELSE _bin END AS _b" in sql


def test_histogram_runs(passes):
    plan = passes.plan("SELECT MEDIAN(age) FROM people")
    [(text,)] = passes.run(passes.sql(plan, "quantiles"))
    hist = _histogram(text)
    assert all(0 <= b < BINS for b in hist)
    # people has one row per unit (m = 1): every age counted once, in its bin
    want = {}
    for (age,) in passes.run("SELECT age FROM people WHERE age IS NOT NULL"):
        b = min(int(min(max(age, 0), 120) / 120 * BINS), BINS - 1)
        want[b] = want.get(b, 0) + 1
    assert hist == want


def test_grouped_histograms_join_on_the_keys(passes):
    plan = passes.plan("SELECT state, MEDIAN(age) FROM people GROUP BY state")
    sql = passes.sql(plan, "quantiles")
    assert sql.startswith(f"SELECT _m._k0, _q0._qh0 FROM ({passes.sql(plan, 'count_distinct')}) AS _m LEFT JOIN (")
    assert sql.endswith(") AS _q0 ON _m._k0 IS NOT DISTINCT FROM _q0._k0")
    got = passes.run(sql)
    counts = dict(passes.run("SELECT state, COUNT(age) FROM people GROUP BY state"))
    assert {k for k, _ in got} == set(counts)
    assert all(sum(_histogram(t).values()) == counts[k] for k, t in got)


def test_no_quantiles_no_join(passes):
    plan = passes.plan("SELECT state, COUNT(*) FROM people GROUP BY state")
    assert passes.sql(plan, "quantiles") == passes.sql(plan, "count_distinct")
