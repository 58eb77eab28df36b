"""Smoke test of benchmarks/bench_core.py at a tiny size: every query is measured and reported.

No timing assertions: only that the functions run end to end, the floor SQL agrees with dpsql's
rewrite, and the tables have a row per query with numbers where numbers belong.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def bench():
    with benchmark_script("bench_core") as module:
        yield module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def result(bench, data_dir):
    return bench.run_size(2000, 1, threads=1, data_dir=data_dir, log=lambda msg: None)


def _number(cell: str) -> float:
    return float(cell.strip().replace(",", ""))


def _table_rows(markdown: str, header_start: str) -> list[list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_size_table_has_every_query_with_numbers(bench, result):
    md = bench.render_size(result)
    rows = _table_rows(md, "| query | dpsql ms")
    assert [r[0].split()[0] for r in rows] == [q.key for q in bench.QUERIES]
    for q, r in zip(bench.QUERIES, rows):
        assert len(r) == 11
        for cell in r[1:6]:                    # dpsql, floor, raw, dpsql/floor, dpsql/raw
            assert _number(cell) > 0
        pk = r[6:9]
        if q.pk:
            assert all(_number(c) > 0 for c in pk)
            assert r[10] in ("met", "**missed**")
        else:
            assert pk == ["—", "—", "—"]
        assert r[9].startswith(("met", "**missed**"))


def test_every_floor_variant_agrees_with_dpsql(bench, result):
    for row in result.rows:
        assert row.floor_name is not None
        assert all(c.ok for c in row.checks), [(row.query.key, c.variant, c.detail) for c in row.checks]
        assert set(row.variants) == {f.name for f in row.query.floors}
    assert "MISMATCH" not in bench.render_size(result)


def test_a_wrong_floor_is_reported(bench, data_dir):
    q = bench.QUERIES[2]                                   # SUM(income)
    wrong = dataclasses.replace(q.floors[0], name="wrong_bound",
                                sql=q.floors[0].sql.replace("500000", "400000"))
    path, _ = bench.ensure_data(2000, data_dir)
    conn, raw = bench.open_connections(path, 1, data_dir / "smoke_ledger.sqlite")
    try:
        checks = bench.verify(conn, raw, dataclasses.replace(q, floors=(q.floors[0], wrong)))
    finally:
        raw.close()
        conn.close()
    assert [c.ok for c in checks] == [True, False]


def test_overhead_table_and_report(bench, result, data_dir):
    path, generated = bench.ensure_data(2000, data_dir)
    assert not generated                                   # reused, not regenerated
    conn, raw = bench.open_connections(path, 1, data_dir / "smoke_ledger.sqlite")
    try:
        over = bench.measure_overhead(conn, runs=5)
        ledger = bench.measure_ledger(conn, runs=3)
    finally:
        raw.close()
        conn.close()
    md = bench.render_overhead(over, ledger, 5)
    rows = _table_rows(md, "| query | p50 ms")
    assert [r[0].split()[0] for r in rows] == [q.key for q in bench.QUERIES]
    for r in rows:
        assert 0 < _number(r[1]) <= _number(r[2])
    report = bench.render_report([result], over, ledger, 5, ["--sizes", "2000"])
    assert "DuckDB" in report and "cores" in report and "2,000 people" in report


def test_postgres_floors_split_and_memory(bench, data_dir, result, postgres_server):
    """--engines postgres at 2,000 people: every PostgreSQL floor agrees with dpsql's rewrite, the pk
    split has a row per pk query with its parts, and the memory table a row per engine."""
    pg = bench.run_size(2000, 1, threads=1, data_dir=data_dir, log=lambda msg: None, engine="postgres",
                        pg_admin=postgres_server)
    assert [r.query.key for r in pg.rows] == [q.key for q in bench.QUERIES if q.pg_floors]
    for row in pg.rows:
        assert row.checks and all(c.ok for c in row.checks), [(row.query.key, c.variant, c.detail) for c in row.checks]
        assert row.floor_name is not None
    md = bench.render_size(pg)
    assert "MISMATCH" not in md and "PostgreSQL" in md
    split = _table_rows(md, "| query | pk dpsql ms | engine ms")
    assert [r[0].split()[0] for r in split] == [q.key for q in bench.QUERIES if q.pk and q.pg_floors]
    for r in split:
        assert _number(r[1]) > 0 and _number(r[2]) > 0 and _number(r[3]) > 0
        assert r[10] in ("met", "**missed**")
    mem = _table_rows(bench.render_memory([result, pg]), "| engine | people")
    assert len(mem) == 2 and all(_number(r[2]) > 0 for r in mem)
