"""Accuracy of the statistics beyond COUNT/SUM/AVG against the exact answer (issue 15).

    python benchmarks/aggregates.py [--people 100000] [--runs 15] [--out benchmarks/results/aggregates.md]

The demo data (dpsql.datagen, seed 0) at --people people, in a temporary DuckDB file. For each query
and each epsilon in (0.1, 1, 10) the query is answered --runs times through dpsql.connect (a fresh
ledger with an unlimited budget; the timing defence off), and the table gives the median relative
error |released - exact| / |exact| (quantiles: also in units of the value) and dpsql's run time.
The exact answer is the same SQL on the raw table (DuckDB's own quantile, correlation, variance),
on the data as the policy sees it: values above the declared bounds clipped, as dpsql clips them.

SmartNoise SQL and Qrlew answer none of these queries (no quantiles, no COUNT(DISTINCT) of a
non-unit column, no correlation), so no field column is given; see docs/QUANTILES.md for how the
quantile mechanism relates to OpenDP's.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import dpsql
from dpsql import datagen

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "aggregates.md"
EPSILONS = (0.1, 1.0, 10.0)

CLIP = "LEAST(GREATEST(income, 0), 500000)"
# (name, dpsql query, exact query on the raw table, policy extras)
QUERIES = (
    ("MEDIAN(income)", "SELECT MEDIAN(income) FROM people", f"SELECT quantile_cont({CLIP}, 0.5) FROM people"),
    ("PERCENTILE_CONT(0.9) income", "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) FROM people",
     f"SELECT quantile_cont({CLIP}, 0.9) FROM people"),
    ("MEDIAN(age)", "SELECT MEDIAN(age) FROM people", "SELECT quantile_cont(age, 0.5) FROM people"),
    ("MAX(age)", "SELECT MAX(age) FROM people", "SELECT max(age) FROM people"),
    ("COUNT(DISTINCT age)", "SELECT COUNT(DISTINCT age) FROM people", "SELECT count(DISTINCT age) FROM people"),
    ("VAR_POP(income)", "SELECT VAR_POP(income) FROM people", f"SELECT var_pop({CLIP}) FROM people"),
    ("STDDEV(age)", "SELECT STDDEV(age) FROM people", "SELECT stddev(age) FROM people"),
    ("CORR(age, income), k = 16", "SELECT CORR(age, income) FROM people", f"SELECT corr(age, {CLIP}) FROM people"),
    ("SUM(income), bounds auto in [0, 1e9]", "SELECT SUM(income) FROM people",
     "SELECT sum(LEAST(GREATEST(income, 0), 1e9)) FROM people"),
)


def policy(ledger: str, auto: bool) -> dict:
    pol = datagen.demo_policy(ledger=ledger, epsilon=1e9, delta=0.5)
    pol["timing"] = {"quantum": 0, "floor": 0}
    pol["reconstruction"] = {"cache_lifetime": 0}       # every run a fresh release, not the cached one
    pol["defaults"]["min_epsilon"] = 0.001
    pol["functions"] = {"sample_aggregate": ["corr"], "blocks": 16}
    if auto:
        pol["tables"]["people"]["columns"]["income"] = {"lower": 0, "upper": 1e9, "bounds": "auto"}
    return pol


def run(people: int, runs: int) -> tuple[list[list[str]], str]:
    tmp = tempfile.mkdtemp(prefix="dpsql-agg-")
    path = os.path.join(tmp, "demo.duckdb")
    con = duckdb.connect(path)
    datagen.generate(con, people, seed=0)
    exact = {name: con.execute(truth).fetchone()[0] for name, _, truth in QUERIES}
    con.close()
    rows = []
    for name, sql, _ in QUERIES:
        auto = "auto" in name
        cells = [name, f"{float(exact[name]):,.6g}"]
        took = []
        for eps in EPSILONS:
            errs = []
            with dpsql.connect(path, policy=policy(os.path.join(tmp, f"l{eps}{auto}.sqlite"), auto),
                               analyst="bench") as conn:
                cur = conn.cursor()
                cur.execute(f"SET dpsql.epsilon = {eps}")
                for _ in range(runs):
                    start = time.perf_counter()
                    cur.execute(sql)
                    got = cur.fetchone()[0]
                    took.append(time.perf_counter() - start)
                    truth = float(exact[name])
                    absolute = name.startswith("CORR")      # near 0 here: a relative error says nothing
                    errs.append(abs(float(got) - truth) / (1 if absolute or not truth else abs(truth)))
            cells.append(f"{statistics.median(errs):.3g}")
        cells.append(f"{statistics.median(took) * 1000:.0f}")
        rows.append(cells)
        print(" | ".join(cells), file=sys.stderr, flush=True)
    load = os.getloadavg()
    env = (f"{people:,} people, {runs} runs per cell, DuckDB {duckdb.__version__}, Python "
           f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load[0]:.1f}/{load[1]:.1f}/"
           f"{load[2]:.1f} at the end")
    return rows, env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--people", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report ('-' for stdout only)")
    args = ap.parse_args(argv)
    rows, env = run(args.people, args.runs)
    lines = ["# Accuracy of the statistics (issue 15)", "",
             f"`python benchmarks/aggregates.py --people {args.people} --runs {args.runs}`: {env}.", "",
             "Median relative error |released - exact| / |exact| over the runs (CORR: absolute error, on "
             "the scale of [-1, 1]), at each query epsilon; "
             "exact: the same statistic of the clipped data on the raw table. ms: median dpsql run time "
             "(parse to release) over every run of the row.", "",
             "| query | exact | ε = 0.1 | ε = 1 | ε = 10 | ms |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if str(args.out) != "-":
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
