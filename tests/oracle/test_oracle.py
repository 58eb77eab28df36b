"""Differential-correctness oracle, CI mode: a fixed set of generated queries on DuckDB and
PostgreSQL, at epsilon 1e9 per query, on data that bounding leaves alone (tests/oracle/schema.py).

What each oracle proves (tests/oracle/oracles.py has the details and tolerances):

* value: every released cell equals the plain query's answer on the same engine (within 10x the
  half-width the release claims), keys exactly, the released groups exactly those the key domains
  and the partition-selection threshold call for, LIMIT a true top-k, and no noisy cell claims a
  zero half-width. A wrong rewrite (lost parentheses, wrong literal type, wrong clamp) shows here.
* sensitivity: removing one unit's rows everywhere (customer row, orders, their lineitems) moves
  each released measure by at most the Linf the plan charged per group, and by at most L1 over all
  groups: the DP guarantee's premise, measured on two neighbours (the unit with the most rows and
  one drawn by the seed).
* agree: DuckDB and PostgreSQL release the same groups and values for the same query and data.
* metamorphic: scaling a column's values and bounds by c (the schema's twin columns, c = 4 and
  c = -1) scales SUM and AVG by c; COUNT and SUM over a WHERE equal the sum over its two halves.
* no internal errors: a query dpsql refuses (QueryRejected) is not a failure; any other exception is.

Every failure message carries the generated SQL, reproducible from the seed (generator.case).
The coverage (distinct shapes, refusals) is printed in the terminal summary and by
test_coverage_is_reported with -s.
"""
from __future__ import annotations

import logging

import pytest

from tests.oracle import generator, oracles, run

# One worker runs this module (pytest-xdist --dist loadgroup): its tally, a module fixture that runs
# every generated query on both engines, is then computed once, not once per worker the tests land on.
pytestmark = pytest.mark.xdist_group("oracle")

DATA_SEED = 7
CASE_SEEDS = range(0, 300)
PAIR_SEEDS = range(10_000, 10_060)


@pytest.fixture(scope="module")
def tally(request, tmp_path_factory):
    """Every oracle over the fixed seeds, once; PostgreSQL too unless its server is skipped
    (postgres_server fails instead of skipping when CI=true)."""
    engines = ["duckdb"]
    server = None
    try:
        server = request.getfixturevalue("postgres_server")
        engines.append("postgres")
    except pytest.skip.Exception:
        pass
    logging.disable(logging.CRITICAL)          # dpsql logs every InternalError's traceback
    t = run.Tally()
    try:
        with run.databases(tmp_path_factory.mktemp("oracle"), DATA_SEED, engines, server) as (targets, near):
            run.run_cases(CASE_SEEDS, targets, near, t)
            run.run_pairs(PAIR_SEEDS, targets, t)
    finally:
        logging.disable(logging.NOTSET)
    run.SUMMARIES.append(run.summary(t))
    t.engines = engines
    return t


def _of(t: run.Tally, oracle: str, engine: str | None = None) -> list:
    return [m for m in t.mismatches[oracle] if engine is None or m.engine == engine]


def _need(t: run.Tally, engine: str, request) -> None:
    if engine == "postgres" and engine not in t.engines:
        request.getfixturevalue("postgres_server")      # skips, or fails when CI=true


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_no_internal_errors(tally, engine, request):
    _need(tally, engine, request)
    found = _of(tally, "error", engine)
    assert not found, oracles.mismatch_report(found)


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_released_values_equal_the_plain_query(tally, engine, request):
    _need(tally, engine, request)
    assert tally.checked["value"] >= len(CASE_SEEDS) // 2
    found = _of(tally, "value", engine)
    assert not found, oracles.mismatch_report(found)


def test_one_unit_moves_each_measure_by_at_most_its_charged_sensitivity(tally):
    assert tally.checked["sensitivity"] >= len(CASE_SEEDS) // 4
    found = _of(tally, "sensitivity")
    assert not found, oracles.mismatch_report(found)


@pytest.mark.postgres
def test_duckdb_and_postgres_agree(tally, request):
    _need(tally, "postgres", request)
    assert tally.checked["agree"] == len(CASE_SEEDS)
    found = _of(tally, "agree")
    assert not found, oracles.mismatch_report(found)


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_metamorphic_relations_hold(tally, engine, request):
    _need(tally, engine, request)
    found = _of(tally, "metamorphic", engine)
    assert not found, oracles.mismatch_report(found)


def test_coverage_is_reported(tally):
    """The generated queries reach every FROM form, aggregate, key form and clause; at most a
    quarter are refused. Prints the coverage (pytest -s)."""
    print("\n" + run.summary(tally))
    feats = set(tally.features)
    want = ({"from:" + s.name for s in generator.SOURCES}
            | {"agg:" + a for a in generator.AGGS}
            | {"expr:paren", "expr:case", "expr:coalesce", "expr:cast", "expr:date", "key:bucket", "key:date",
               "key:public", "key:selected", "having", "order:value", "limit", "meta:scale", "meta:partition"})
    assert want <= feats, sorted(want - feats)
    assert len(tally.shapes) >= 100
    assert sum(tally.refused.values()) <= tally.generated * len(tally.engines) // 4, tally.refused.most_common(5)


def test_generator_is_reproducible_by_seed():
    assert [generator.case(s) for s in range(20)] == [generator.case(s) for s in range(20)]
    assert generator.pair(5) == generator.pair(5)
    assert len({generator.case(s).sql for s in range(50)}) == 50


def test_noisy_cells_never_claim_a_zero_half_width(tmp_path):
    """At a modest epsilon, AVG over small groups is often clamped to its bounds; a clamped noisy
    value is still uncertain, so its 95% half-width must stay positive (the value oracle's width
    check, where noise is large enough to reach the clamp). Seeded noise: reproducible."""
    import dpsql
    from dpsql.noise.rng import SeededRng

    from tests.oracle import schema
    path = schema.write_duckdb(tmp_path / "widths.duckdb", schema.generate(DATA_SEED))
    conn = dpsql.connect(path, policy=schema.policy(str(tmp_path / "ledger.sqlite")), analyst="w", rng=SeededRng(11))
    zero = []
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 2")
        for i in range(20):
            sql = (f"SELECT c.c_nationkey, AVG(c.c_age) AS a, AVG(c.c_score) AS s FROM customer c "
                   f"WHERE c.c_score > {i % 5}.5 AND c.c_age > {18 + i} GROUP BY c.c_nationkey")
            cur.execute(sql)
            # a NULL AVG (the noisy count rounds to no row) claims nothing
            zero += [(sql, row, w) for row, w in zip(cur.fetchall(), cur.half_widths)
                     if not all(h is not None and h > 0 for v, h in zip(row[1:], w[1:]) if v is not None)]
    finally:
        conn.close()
    assert not zero, f"{len(zero)} rows claim a zero half-width, e.g. {zero[:3]}"
