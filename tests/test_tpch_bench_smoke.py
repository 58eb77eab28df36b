"""Smoke test of benchmarks/tpch.py at a tiny scale factor on DuckDB: the generated data satisfy
every bound, value domain and contribution limit the policy declares (checked by SQL), the runner
completes and reports a row for each of the 22 queries (as written) and each adapted form, and
every answered query is right (its released values match the plain engine's at epsilon 1e9).

Strict on purpose: while dpsql has known defects (row-expression parentheses, per-unit sums
floored at m*lo, fractional bounds, literal types, FK->PK joins multiplying the limits), this test
fails and says which queries are wrong."""
from __future__ import annotations

import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tpch  # noqa: E402
import tpch_data  # noqa: E402
from tpch_queries import ADAPTED, QUERIES  # noqa: E402


def test_tpch_benchmark_tiny(tmp_path):
    db = str(tmp_path / "tpch.duckdb")
    gen = tpch_data.generate(db, 0.002, seed=1, threads=1)
    assert gen["rows"]["lineitem"] > 1000 and gen["rows"]["region"] == 5 and gen["rows"]["nation"] == 25
    con = duckdb.connect(db, read_only=True)
    try:
        pol = tpch_data.policy(str(tmp_path / "ledger.sqlite"))
        assert tpch_data.check_bounds(con, pol) == []
        assert tpch_data.check_bounds(con, tpch_data.policy(str(tmp_path / "l2.sqlite"), integral=True)) == []
        # the limits the policy's comments promise, directly
        per_cust = con.execute("SELECT max(n) FROM (SELECT o_custkey, count(*) AS n FROM orders GROUP BY 1)").fetchone()[0]
        per_order = con.execute("SELECT max(n) FROM (SELECT l_orderkey, count(*) AS n FROM lineitem GROUP BY 1)").fetchone()[0]
        assert per_cust <= pol["tables"]["orders"]["max_rows_per_unit"]
        assert per_order <= tpch_data.MAX_LINES
        assert con.execute("SELECT count(*) FROM orders WHERE o_custkey % 3 = 0").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM lineitem l LEFT JOIN orders o ON l.l_orderkey = o.o_orderkey "
                           "WHERE o.o_orderkey IS NULL").fetchone()[0] == 0
    finally:
        con.close()
    results = tpch.run(db, "duckdb", runs=1, workdir=str(tmp_path))
    labels = [r["q"] for r in results]
    assert labels == [f"Q{q}" for q in QUERIES] + [f"Q{q}a" for q in ADAPTED]
    assert len(QUERIES) == 22
    report = tpch.table(results)
    assert all(f"| {q} |" in report for q in labels)
    assert any(line.startswith("duckdb: answered as written: ") for line in tpch.summary(results))
    broken = [f"{r['q']}: {r.get('verdict') or r.get('detail')}" for r in results
              if r["status"] == "internal error" or (r["status"] == "answered" and not r["verdict"].startswith("right"))]
    assert not broken, "\n".join(broken)


def test_tpch_benchmark_tiny_with_supplier_as_the_unit(tmp_path):
    """The second run: supplier, partsupp and lineitem carry the unit; limits read from the data
    hold, and every answered query is right."""
    db = str(tmp_path / "tpch.duckdb")
    tpch_data.generate(db, 0.002, seed=2, threads=1)
    con = duckdb.connect(db, read_only=True)
    try:
        limits = tpch_data.supplier_limits(con)
        pol = tpch_data.supplier_policy(str(tmp_path / "ledger.sqlite"), limits)
        assert set(pol["tables"]) == {"supplier", "partsupp", "lineitem"}
        assert tpch_data.check_bounds(con, pol) == []
    finally:
        con.close()
    results = tpch.run(db, "duckdb", runs=1, workdir=str(tmp_path),
                       make_policy=lambda ledger, integral=False: tpch_data.supplier_policy(ledger, limits,
                                                                                           integral=integral))
    answered = [r for r in results if r["status"] == "answered"]
    assert len(answered) >= 10
    broken = [f"{r['q']}: {r.get('verdict') or r.get('detail')}" for r in results
              if r["status"] == "internal error" or (r["status"] == "answered" and not r["verdict"].startswith("right"))]
    assert not broken, "\n".join(broken)
