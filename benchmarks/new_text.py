"""Python work per query text (issue 33): new texts (constants change) against repeated ones.

On the bundled demo's data and policy (20,000 people, DuckDB in-process), at SET dpsql.epsilon =
0.1, for each shape below and N texts of it that differ only in a constant, the p50 and p90 (ms) of

- parse: dpsql.analysis.parse.classify(text)
- plan: dpsql.planner.plan(statement, inputs) (analysis, no plan cache)
- rewrite: dpsql.rewrite.to_sql(plan, "duckdb") (the rewrite passes and SQL generation)
- execute - engine: Session.execute(text) minus the time inside Engine.run (which holds the
  engine's query and the ledger's charge): parse, plan, rewrite, noise, release, the plan cache

then the same for one text repeated (the session's plan cache hits). The policy is the demo's with
a lifetime budget large enough for the run, the timing defence off ([timing] floor and quantum 0:
its release delay is a sleep, not Python work) and the answer cache off (so repeats are planned
from the plan cache and run, not answered from the answer cache).

    python benchmarks/new_text.py                       # N = 200 per shape, table on stdout
    python benchmarks/new_text.py -n 100 --profile new  # and a cProfile of the new-text path
    PYTHONPATH=/other/checkout python benchmarks/new_text.py   # the same on another checkout
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dpsql
from dpsql import datagen, demo, planner
from dpsql.analysis.parse import classify
from dpsql.rewrite import to_sql

SHAPES = {
    "group by": "SELECT state, COUNT(*), AVG(income) FROM people WHERE age > {i} GROUP BY state",
    "join": ("SELECT p.state, COUNT(*), SUM(v.cost) FROM people p JOIN visits v ON p.person_id = v.person_id "
             "WHERE p.age > {i} GROUP BY p.state"),
    "having": ("SELECT education, COUNT(*) AS n FROM people WHERE income > {i}000 GROUP BY education "
               "HAVING COUNT(*) > 10"),
    "case": ("SELECT CASE WHEN age < {j} THEN 'young' ELSE 'old' END AS band, COUNT(*), AVG(income) "
             "FROM people GROUP BY 1"),
    "date filter": ("SELECT kind, COUNT(*), AVG(cost) FROM visits "
                    "WHERE visit_date >= DATE '2023-01-01' + {i} GROUP BY kind"),
    "scalar": "SELECT COUNT(*), SUM(income) FROM people WHERE age BETWEEN {i} AND 90",
}


def text(shape: str, i: int) -> str:
    return SHAPES[shape].format(i=i, j=i + 10)


def connect(home: Path):
    os.environ["DPSQL_HOME"] = str(home)
    db, _ = demo.ensure_demo(home)
    policy = datagen.demo_policy(str(home / "bench.sqlite"), epsilon=1e9, delta=1e-3,
                                 query_epsilon=demo.DEMO_QUERY_EPSILON, mechanism=demo.DEMO_MECHANISM,
                                 accountant="zcdp", query_rho=demo.DEMO_QUERY_RHO)
    policy["timing"] = {"floor": 0, "quantum": 0}
    policy["reconstruction"] = {"cache_lifetime": 0}
    conn = dpsql.connect(str(db), policy=policy, analyst=demo.DEMO_ANALYST)
    conn.session.execute("SET dpsql.epsilon = 0.1")
    return conn


class EngineClock:
    """Time spent inside the session's Engine.run (the engine's query and the ledger's charge)."""

    def __init__(self, engine):
        self.spent = 0.0
        run = engine.run

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return run(*a, **k)
            finally:
                self.spent += time.perf_counter() - t
        engine.run = timed


def timings(session, clock: EngineClock, texts: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"parse": [], "plan": [], "rewrite": [], "execute - engine": []}
    dialect = session.engine.dialect
    for t in texts:
        a = time.perf_counter()
        stmt = classify(t)
        b = time.perf_counter()
        plan = planner.plan(stmt, session._inputs())
        c = time.perf_counter()
        to_sql(plan, dialect)
        d = time.perf_counter()
        out["parse"].append(b - a)
        out["plan"].append(c - b)
        out["rewrite"].append(d - c)
    for t in texts:
        clock.spent = 0.0
        a = time.perf_counter()
        session.execute(t)
        out["execute - engine"].append(time.perf_counter() - a - clock.spent)
    return out


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def run(n: int, profile: str | None) -> str:
    with tempfile.TemporaryDirectory() as home:
        conn = connect(Path(home))
        session = conn.session
        clock = EngineClock(session.engine)
        for shape in SHAPES:        # warm up: imports, the engine, first-use caches
            session.execute(text(shape, 10_000))
        lines = [f"N = {n} texts per shape; ms; dpsql from {Path(dpsql.__file__).parent.parent}", "",
                 "| shape | texts | parse p50 | p90 | plan p50 | p90 | rewrite p50 | p90 | execute - engine p50 | p90 |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        totals: dict[str, dict[str, list[float]]] = {"new": {}, "repeated": {}}
        for shape in SHAPES:
            new = [text(shape, i) for i in range(n)]
            rep = [text(shape, 5_000)] * n
            session.execute(rep[0])           # the repeated text's plan is cached before timing
            for kind, texts in (("new", new), ("repeated", rep)):
                # the stage timings bypass the plan cache, so the new texts are still new to it
                t = timings(session, clock, texts)
                row = [f"{quantile(t[k], .5):.2f} | {quantile(t[k], .9):.2f}" for k in t]
                lines.append(f"| {shape} | {kind} | " + " | ".join(row) + " |")
                for k, v in t.items():
                    totals[kind].setdefault(k, []).extend(v)
        for kind in ("new", "repeated"):
            row = [f"{quantile(v, .5):.2f} | {quantile(v, .9):.2f}" for v in totals[kind].values()]
            lines.append(f"| **all** | {kind} | " + " | ".join(row) + " |")
        if profile:
            lines += ["", profiled(session, n, profile)]
        conn.close()
    return "\n".join(lines)


def profiled(session, n: int, which: str) -> str:
    """cProfile of parse + plan + rewrite for n new texts of every shape (no engine, no charge)."""
    dialect = session.engine.dialect
    texts = [text(shape, i + 2000) for shape in SHAPES for i in range(n)]
    prof = cProfile.Profile()
    prof.enable()
    for t in texts:
        to_sql(planner.plan(classify(t), session._inputs()), dialect)
    prof.disable()
    out = io.StringIO()
    for key in ("cumulative", "tottime"):
        out.write(f"### sorted by {key}\n\n```\n")
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(key).print_stats(30)
        out.write("```\n\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200, help="texts per shape (default 200)")
    ap.add_argument("--profile", choices=["new"], default=None, help="append a cProfile of the new-text path")
    ap.add_argument("--out", default="-", help="a file for the table (default stdout)")
    args = ap.parse_args(argv)
    report = run(args.n, args.profile)
    if args.out == "-":
        print(report)
    else:
        Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
