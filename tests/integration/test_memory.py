"""dpsql's own memory does not grow with the table: no rows are moved into Python.

The same private queries run on a table of 20,000 people and on one of 2,000,000; the peak of
the memory Python allocates while each query runs (tracemalloc: Python's own allocations, not
the engine's, which lives in DuckDB's C++ heap) must be the same up to a small constant. A
pipeline that fetched rows, or per-person values, would allocate tens of megabytes more on the
large table (2M rows x dozens of bytes each). Engine memory is the engine's business (capped by
its own settings); this is the promise that dpsql adds nothing per row.
"""
from __future__ import annotations

import tracemalloc

import duckdb
import pytest

import dpsql

QUERIES = [
    "SELECT COUNT(*) FROM people",
    "SELECT SUM(income), AVG(age) FROM people",
    "SELECT state, COUNT(*), AVG(income) FROM people GROUP BY state",
    "SELECT sex, COUNT(*) FROM people WHERE age > 30 GROUP BY sex",          # partition selection (no domain)
    "SELECT MEDIAN(income) FROM people",
    "SELECT VAR_POP(age), COUNT(DISTINCT age) FROM people",
    "SELECT age / 10 * 10 AS band, COUNT(*) FROM people GROUP BY band",
]


def _make(path, people: int) -> None:
    con = duckdb.connect(str(path))
    con.execute(f"""CREATE TABLE people AS SELECT i AS person_id, CAST(i % 90 AS INTEGER) AS age,
        CAST((i * 7919) % 200000 AS DOUBLE) AS income, ['CA', 'NY', 'TX', 'WA'][(i % 4) + 1] AS state,
        CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END AS sex FROM range({people}) t(i)""")
    con.close()


def _policy(tmp_path, name: str) -> dict:
    return {"budget": {"epsilon": 1e6, "delta": 1e-6, "ledger": str(tmp_path / f"{name}.sqlite"),
                       "accountant": "basic"},
            "defaults": {"epsilon": 1.0, "mechanism": "laplace"}, "timing": {"quantum": 0, "floor": 0},
            "reconstruction": {"cache_lifetime": 0},
            "tables": {"people": {"privacy_unit": "person_id", "max_rows_per_unit": 1, "max_groups_per_unit": 1,
                                  "columns": {"age": {"lower": 0, "upper": 120},
                                              "income": {"lower": 0, "upper": 200000},
                                              "state": {"values": ["CA", "NY", "TX", "WA"]},
                                              "sex": {}}}}}


def _peaks(conn) -> list[int]:
    """Peak Python allocation (bytes) while each query is answered, after one warm-up each."""
    cur = conn.cursor()
    for sql in QUERIES:
        cur.execute(sql)
        cur.fetchall()
    out = []
    tracemalloc.start()
    try:
        for sql in QUERIES:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            cur.execute(sql)
            cur.fetchall()
            out.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()
    return out


def test_python_memory_per_query_does_not_grow_with_the_table(tmp_path):
    small, large = tmp_path / "small.duckdb", tmp_path / "large.duckdb"
    _make(small, 20_000)
    _make(large, 2_000_000)
    with dpsql.connect(str(small), policy=_policy(tmp_path, "s"), analyst="a") as c:
        few = _peaks(c)
    with dpsql.connect(str(large), policy=_policy(tmp_path, "l"), analyst="a") as c:
        many = _peaks(c)
    for sql, a, b in zip(QUERIES, few, many):
        # 100x the rows: a per-row or per-person allocation would add megabytes; allow 1 MB of jitter
        assert b <= a + 1_000_000, f"{sql}: peak {b:,} bytes on 2M people vs {a:,} on 20k"


_CAPPED_CHILD = r"""
import json, sys
import dpsql
path, policy, limit, queries = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
with dpsql.connect(path, policy=policy, analyst="a", memory_limit=limit, threads=2) as c:
    cur = c.cursor()
    for sql in queries:
        cur.execute(sql)
        assert cur.fetchall()
with open("/proc/self/status") as fh:
    print(next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")))
"""


def _capped_peak_kb(tmp_path, path, name: str, limit: str) -> int:
    import json
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _CAPPED_CHILD, str(path), json.dumps(_policy(tmp_path, name)), limit,
                           json.dumps(QUERIES[:4])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_large_table_under_an_engine_memory_cap(tmp_path):
    """2M people with DuckDB capped at 128 MB (memory_limit): every query succeeds, and the whole
    process's peak resident memory (dpsql, Python, DuckDB) exceeds that of the same queries on 20,000
    people by no more than the cap and a little: nothing in dpsql grows with the table. (The cap is
    DuckDB's own: RLIMIT_AS would count the address space its threads reserve, not memory used.)"""
    import os
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc (Linux) for the peak resident set")
    small, large = tmp_path / "small.duckdb", tmp_path / "large.duckdb"
    _make(small, 20_000)
    _make(large, 2_000_000)
    few = _capped_peak_kb(tmp_path, small, "cs", "128MB")
    many = _capped_peak_kb(tmp_path, large, "cl", "128MB")
    assert many <= few + (128 + 64) * 1024, f"peak {many // 1024} MB on 2M people vs {few // 1024} MB on 20k"
