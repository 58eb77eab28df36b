"""Forms of an exact, clamped SUM over DuckDB's primary-key table (issue 17, item 3).

Times each form of `SUM(income)` over `people_pk` (bench_core's data, generated if missing),
interleaved, and prints a markdown table of medians: how much of dpsql's engine part on the
primary-key path is the clamp, the exact scaled cast, and the rows subquery.

    python benchmarks/pk_sum_forms.py [--people 1000000] [--runs 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_core as B  # noqa: E402

CLAMP = "CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END"
FORMS = {
    "raw `SUM(income)`": ("SELECT SUM(income) FROM people_pk", "no (no clamp)"),
    "dpsql's rewrite: clamp, scale, cast to BIGINT, through its rows subquery":
        (f"SELECT SUM(_x0) FROM (SELECT person_id AS _u, CAST({CLAMP} * 1000000 AS BIGINT) AS _x0 FROM people_pk) AS _rows",
         "yes"),
    "the same without the rows subquery": (f"SELECT SUM(CAST({CLAMP} * 1000000 AS BIGINT)) FROM people_pk", "yes"),
    "the CASE clamp, plain DOUBLE SUM": (f"SELECT SUM({CLAMP}) FROM people_pk",
                                          "no (a float sum: its rounding depends on the rows)"),
    "the scaled cast alone, rows filtered to the bounds":
        ("SELECT SUM(CAST(income * 1000000 AS BIGINT)) FROM people_pk WHERE income BETWEEN 0 AND 500000",
         "no (not a clamp)"),
    "`LEAST(GREATEST(x, 0), 500000)` instead of CASE":
        ("SELECT SUM(CAST(LEAST(GREATEST(income, 0), 500000) * 1000000 AS BIGINT)) FROM people_pk",
         "yes (NULL handling differs)"),
    "`CAST(clamp AS DECIMAL(18,6))`": (f"SELECT SUM(CAST({CLAMP} AS DECIMAL(18,6))) FROM people_pk", "yes"),
    "`CAST(clamp * 1000000 AS HUGEINT)`": (f"SELECT SUM(CAST({CLAMP} * 1000000 AS HUGEINT)) FROM people_pk", "yes"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    path, _ = B.ensure_data(args.people, B.DATA_DIR)
    con = duckdb.connect(str(path), read_only=True)
    con.execute(f"SET threads={args.threads}")
    times: dict[str, list[float]] = {k: [] for k in FORMS}
    for _ in range(args.runs + 1):                      # the first round warms up
        for k, (sql, _) in FORMS.items():
            t0 = time.perf_counter()
            con.execute(sql).fetchone()
            times[k].append((time.perf_counter() - t0) * 1000)
    print(f"{args.people:,} rows in people_pk, DuckDB {duckdb.__version__}, {args.threads} threads, "
          f"median of {args.runs} interleaved runs; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| form | ms | exact and bounded |\n|---|---:|---|")
    for k, (_, exact) in FORMS.items():
        print(f"| {k} | {statistics.median(times[k][1:]):.2f} | {exact} |")


if __name__ == "__main__":
    main()
