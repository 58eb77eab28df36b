"""Where the time of one private query goes: a budget per stage, per query, with the engine's plans.

    python benchmarks/time_budget.py [--sf 0.1] [--field-people 100000] [--runs 5] [--postgres]

For each query of the TPC-H benchmark (benchmarks/tpch_queries.py, customer as the unit, data from
benchmarks/tpch_data.py) and of the field benchmark (benchmarks/field/run.py's Q1-Q6 on dpsql.datagen's
seeded workload), one Session (dpsql.session) answers the query while the stage functions it calls
are wrapped with timers (in this process only: the wrappers call the real functions and return
what they return):

    parse     dpsql.analysis.parse.classify (as the Session and the planner call it)
    analysis  dpsql.planner.planned (the plan: analysis, sensitivity, mechanism, cost)
    rewrite   dpsql.rewrite.to_sql (the rewritten SQL in the engine's dialect)
    charge    dpsql.charge.charge_parts and dpsql.charge.charge (the ledger's transaction)
    facts     the engine's schema-facts check inside the query's transaction (engine._facts)
    engine    the engine's run (the rewritten SQL, in the engine, with its fetch)
    release   dpsql.release.mechanisms_for, answer, present, release_delay (noise, post-processing)
    encode    the rows as pgwire DataRow messages (dpsql.frontends.pgwire.values.row_encoder, text)
    other     the rest of Session.execute (plan keys, settings, cache look-ups, locks)

Times are exclusive: a stage called inside another (the charge runs inside the engine's run, as
its `before` callback) is counted in its own column only. Every column is the median over --runs
runs in ms; "dpsql" is the median of Session.execute's wall time (every stage but encode), "plain"
the median of the same SQL on the plain engine (execute + fetch), interleaved with dpsql's runs.

Two modes: "new text" gives every run a text never seen before (a leading comment with the run's
number: the plan cache misses, as it does for an analyst's or a BI tool's new literals), "repeated"
sends the same text each run (the plan, its SQL and its charge parts are reused). Each run really
executes: the policies have no answer cache (cache_lifetime 0) and no release timing (the [timing]
floor and quantum 0, as in tpch.py and bench_core.py), and a budget no run exhausts.

Plans: the engine's EXPLAIN (ANALYZE, FORMAT JSON) of the plain query and of the rewritten SQL, each
summarised as its total time, its planning time and its top operators
(benchmarks/results/time_budget_plans.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tpch  # noqa: E402
import tpch_data  # noqa: E402

import dpsql.charge  # noqa: E402
import dpsql.planner  # noqa: E402
import dpsql.release  # noqa: E402
import dpsql.session  # noqa: E402
from dpsql import datagen  # noqa: E402
from dpsql.engines.postgres import _bound as _pg_bound  # noqa: E402
from dpsql.frontends.pgwire.types import pg_type  # noqa: E402
from dpsql.frontends.pgwire.values import row_encoder  # noqa: E402
from dpsql.session import Session  # noqa: E402

STAGES = ("parse", "analysis", "rewrite", "charge", "facts", "engine", "release", "encode", "other")
MODES = ("new text", "repeated")
EPSILON = 0.8


def _field_module():
    """benchmarks/field/run.py (its QUERIES and dpsql_policy), loaded by path."""
    spec = importlib.util.spec_from_file_location("field_run", HERE / "field" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- timers --------------------------------------------------------------------------------------

class Timers:
    """Exclusive time per stage: a wrapped call's time less the wrapped calls made inside it."""

    def __init__(self):
        self.acc: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []
        self.last_run: tuple[str, Any] | None = None

    def reset(self) -> None:
        self.acc.clear()
        self._stack.clear()

    def wrap(self, stage: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            self._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                inner = self._stack.pop()
                self.acc[stage] += elapsed - inner
                if self._stack:
                    self._stack[-1] += elapsed
        timed.__wrapped__ = fn
        return timed


# (module, attribute, stage): the functions Session.execute reaches, by the names it calls them by
PATCHES = [
    (dpsql.session, "classify", "parse"),
    (dpsql.planner, "classify", "parse"),
    (dpsql.planner, "planned", "analysis"),
    (dpsql.session, "to_sql", "rewrite"),
    (dpsql.charge, "charge_parts", "charge"),
    (dpsql.charge, "charge", "charge"),
    (dpsql.release, "mechanisms_for", "release"),
    (dpsql.release, "answer", "release"),
    (dpsql.release, "present", "release"),
    (dpsql.release, "release_delay", "release"),
]


# the engine's schema-facts read in the query's transaction: DuckDB's (none when its facts are
# fixed: a file dpsql opened, nobody else writes), PostgreSQL's (BEGIN and the facts query)
FACTS = ("_facts", "_begin")


@contextmanager
def instrumented(session: Session, timers: Timers):
    """The stage functions wrapped with timers while the block runs, restored after it."""
    saved = []
    for mod, name, stage in PATCHES:
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, timers.wrap(stage, getattr(mod, name)))
    engine = session.engine
    real_run = engine.run

    def run(sql, params=None, **kw):
        timers.last_run = (sql, params)
        return real_run(sql, params, **kw)
    engine.run = timers.wrap("engine", run)
    facts = [n for n in FACTS if hasattr(engine, n) and n not in vars(engine)]
    for n in facts:
        setattr(engine, n, timers.wrap("facts", getattr(engine, n)))
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        del engine.run
        for n in facts:
            delattr(engine, n)


def encode_rows(result) -> int:
    """The result's rows as pgwire DataRow messages (text format), as the proxy sends them; -> bytes."""
    spec = [(pg_type(t).oid, 0) for t in (result.db_types or ["TEXT"] * len(result.columns))]
    encode = row_encoder(spec)
    return len(b"".join(encode(tuple(None if v is None else v for v in r)) for r in result.rows))


# --- one query -----------------------------------------------------------------------------------

def measure(session: Session, plain: tpch.Plain, sql: str, runs: int, timers: Timers, tag: str) -> dict[str, Any]:
    """Per mode: the median ms of each stage, of dpsql's execute and of the plain engine."""
    out: dict[str, Any] = {}
    try:
        first = session.execute(sql)          # warms the engine; puts the plan in the cache for "repeated"
    except dpsql.session.Error as err:
        return {"status": f"refused: {tpch._first_line(err)}"}
    out["rows"] = len(first.rows)
    out["private"] = first.kind.name == "PRIVATE"
    for mode in MODES:
        per: dict[str, list[float]] = {s: [] for s in STAGES}
        total, plain_t = [], []
        for i in range(runs):
            text = sql if mode == "repeated" else f"/* time budget {tag} {i} {time.monotonic_ns()} */ {sql}"
            t0 = time.perf_counter()
            plain.run(sql)
            plain_t.append(time.perf_counter() - t0)
            timers.reset()
            t0 = time.perf_counter()
            with instrumented(session, timers):
                result = session.execute(text)
                rows = result.rows
            wall = time.perf_counter() - t0
            t0 = time.perf_counter()
            encode_rows(result)
            timers.acc["encode"] = time.perf_counter() - t0
            timers.acc["other"] = wall - sum(v for k, v in timers.acc.items() if k not in ("encode", "other"))
            for s in STAGES:
                per[s].append(timers.acc.get(s, 0.0))
            total.append(wall)
            del rows
        out[mode] = {"stages": {s: statistics.median(v) for s, v in per.items()},
                     "dpsql": statistics.median(total), "plain": statistics.median(plain_t)}
    out["rewritten"] = timers.last_run
    out["status"] = "answered"
    return out


# --- plans ---------------------------------------------------------------------------------------

def _operators(node: dict, out: list) -> list:
    name = node.get("name") or node.get("operator_name") or node.get("type")
    t = node.get("timing", node.get("operator_timing", 0.0)) or 0.0
    rows = node.get("operator_cardinality", node.get("intermediate_rows"))
    if name not in ("RESULT_COLLECTOR", "EXPLAIN_ANALYZE", "EXPLAIN", "Query"):
        out.append((float(t), name, rows))
    for c in node.get("children", []):
        _operators(c, out)
    return out


def duckdb_plan(con, sql: str, params=None) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, FORMAT JSON), summarised: the operators' total time and the top three."""
    try:
        row = con.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", dict(params) if params else None).fetchall()[0]
    except duckdb.Error as err:
        return {"error": tpch._first_line(err)}
    doc = json.loads(row[1])
    ops = []
    for root in doc.get("operator", doc.get("children", [])) if isinstance(doc, dict) else doc:
        _operators(root, ops)
    ops.sort(key=lambda o: -o[0])
    q = doc.get("query", {}) if isinstance(doc, dict) else {}
    plan_t = (doc.get("planner", {}).get("total_time", 0.0) + doc.get("optimizer", {}).get("total_time", 0.0)
              + doc.get("physical_planner", {}).get("total_time", 0.0)) if isinstance(doc, dict) else 0.0
    return {"total": q.get("total_time"), "planning": plan_t, "ops_time": sum(o[0] for o in ops),
            "operators": len(ops), "rows_scanned": q.get("total_rows_scanned"), "top": ops[:3]}


def _pg_nodes(node: dict, out: list) -> list:
    """(own time, node type, rows) of every node: its actual total time less its children's."""
    kids = node.get("Plans", [])
    own = node.get("Actual Total Time", 0.0) * node.get("Actual Loops", 1) - sum(
        k.get("Actual Total Time", 0.0) * k.get("Actual Loops", 1) for k in kids)
    out.append((max(own, 0.0) / 1000, node.get("Node Type"), node.get("Actual Rows")))
    for k in kids:
        _pg_nodes(k, out)
    return out


def postgres_plan(con, sql: str, params=None) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, FORMAT JSON) on PostgreSQL, summarised as duckdb_plan's."""
    try:
        with con.cursor() as cur:
            text = _pg_bound(sql, frozenset(params)) if params else sql   # as the engine binds the salt
            cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {text}", dict(params) if params else None)
            doc = cur.fetchone()[0]
    except Exception as err:        # noqa: BLE001
        return {"error": tpch._first_line(err)}
    doc = (json.loads(doc) if isinstance(doc, str) else doc)[0]
    ops = sorted(_pg_nodes(doc["Plan"], []), key=lambda o: -o[0])
    return {"total": (doc.get("Planning Time", 0.0) + doc.get("Execution Time", 0.0)) / 1000,
            "planning": doc.get("Planning Time", 0.0) / 1000, "ops_time": doc.get("Execution Time", 0.0) / 1000,
            "operators": len(ops), "rows_scanned": None, "top": ops[:3]}


def _plan_cell(p: dict[str, Any] | None) -> str:
    if not p:
        return ""
    if "error" in p:
        return "error: " + p["error"].replace("|", "\\|")
    top = "; ".join(f"{n} {t * 1000:.1f} ms ({r} rows)" for t, n, r in p["top"])
    total = "" if p["total"] is None else f"{p['total'] * 1000:.1f} ms: "
    return (f"{total}planning {p['planning'] * 1000:.1f} ms, {p['operators']} operators {p['ops_time'] * 1000:.1f} ms"
            + ("" if p["rows_scanned"] is None else f", {p['rows_scanned']} rows scanned") + f"; top: {top}")


# --- the benchmarks ------------------------------------------------------------------------------

def run_suite(name: str, target: str, policy: dict, queries: list[tuple[str, str]], runs: int, *,
              plain_engine: str = "duckdb", plans: bool = True, progress=None) -> list[dict[str, Any]]:
    session = Session.open(target, policy, "a")
    session.execute(f"SET dpsql.epsilon = {EPSILON}")
    plain = tpch.Plain(plain_engine, target)
    timers = Timers()
    plan_con = plain.con if plans else None
    explain = duckdb_plan if plain_engine == "duckdb" else postgres_plan
    out = []
    try:
        for label, sql in queries:
            t0 = time.perf_counter()
            try:
                r = measure(session, plain, sql, runs, timers, label)
            except Exception as err:        # noqa: BLE001
                r = {"status": f"error: {type(err).__name__}: {tpch._first_line(err)}"}
            r.update(q=label, suite=name, sql=sql)
            if plan_con is not None and r["status"] == "answered":
                r["plan_plain"] = explain(plan_con, sql)
                if r.get("private") and r.get("rewritten"):
                    rsql, params = r["rewritten"]
                    r["plan_dpsql"] = explain(plan_con, rsql, params)
            out.append(r)
            if progress:
                progress(f"{name} {label}: {r['status']} ({time.perf_counter() - t0:.1f} s)")
    finally:
        plain.close()
        session.close()
    return out


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v * 1000:.2f}"


def table(results: list[dict[str, Any]], mode: str) -> str:
    head = ["query", "rows", *STAGES, "dpsql", "plain", "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if r["status"] != "answered":
            lines.append(f"| {r['q']} | {r['status'].replace('|', '/')} |" + " |" * (len(head) - 2))
            continue
        m = r[mode]
        ratio = m["dpsql"] / m["plain"] if m["plain"] else None
        q = r["q"] + ("" if r.get("private", True) else " (public)")
        cells = [q, str(r["rows"]), *(_ms(m["stages"][s]) for s in STAGES), _ms(m["dpsql"]), _ms(m["plain"]),
                 "" if ratio is None else f"{ratio:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def shares(results: list[dict[str, Any]], mode: str) -> str:
    """Each stage's share of the summed medians over the suite's answered private queries."""
    rs = [r for r in results if r["status"] == "answered" and r.get("private")]
    if not rs:
        return ""
    tot = {s: sum(r[mode]["stages"][s] for r in rs) for s in STAGES}
    whole = sum(tot.values()) or 1.0
    ratios = sorted(r[mode]["dpsql"] / r[mode]["plain"] for r in rs if r[mode]["plain"])
    parts = ", ".join(f"{s} {100 * v / whole:.0f}%" for s, v in sorted(tot.items(), key=lambda kv: -kv[1]))
    py = sum(v for s, v in tot.items() if s not in ("engine", "encode")) / len(rs)
    return (f"Shares of the summed stage medians over {len(rs)} private queries: {parts}. "
            f"Python outside the engine (all but engine and encode): {py * 1000:.2f} ms per query on average. "
            f"dpsql/plain median {statistics.median(ratios):.1f}x (min {ratios[0]:.1f}x, max {ratios[-1]:.1f}x).")


def plans_report(results: list[dict[str, Any]]) -> str:
    lines = ["| query | plain: EXPLAIN ANALYZE | dpsql's rewritten SQL: EXPLAIN ANALYZE |", "|---|---|---|"]
    for r in results:
        if "plan_plain" in r:
            lines.append(f"| {r['suite']} {r['q']} | {_plan_cell(r['plan_plain'])} | {_plan_cell(r.get('plan_dpsql'))} |")
    detail = []
    for r in results:
        if r.get("rewritten") and r.get("private"):
            detail += [f"<details><summary>{r['suite']} {r['q']}: the rewritten SQL</summary>", "",
                       "```sql", r["rewritten"][0].strip(), "```", "", "</details>", ""]
    return "\n".join(lines + [""] + detail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (0: skip TPC-H)")
    ap.add_argument("--field-people", type=int, default=100_000, help="field benchmark's people (0: skip it)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--queries", default="", help="comma-separated TPC-H query numbers (default: all 22)")
    ap.add_argument("--no-adapted", action="store_true", help="only the TPC-H queries as written")
    ap.add_argument("--postgres", action="store_true", help="also TPC-H on PostgreSQL (copied from DuckDB)")
    ap.add_argument("--no-plans", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "time_budget.md"), help="the report ('-': stdout only)")
    ap.add_argument("--plans-out", default=str(HERE / "results" / "time_budget_plans.md"),
                    help="the plans ('-': not written)")
    args = ap.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    only = [int(q) for q in args.queries.split(",")] if args.queries else None
    suites: list[tuple[str, list[dict[str, Any]]]] = []
    setup = [f"- dpsql commit {tpch._commit()}, {os.cpu_count()} cores (shared), DuckDB {duckdb.__version__}, "
             f"epsilon {EPSILON}, median of {args.runs} runs per mode, after one warm-up run"]
    with tempfile.TemporaryDirectory(prefix="dpsql_budget_") as tmp:
        if args.sf > 0:
            db = os.path.join(tmp, "tpch.duckdb")
            g = tpch_data.generate(db, args.sf, seed=0, threads=2)
            say(f"generated TPC-H SF {args.sf:g} in {g['seconds']:.1f} s")
            setup.append(f"- TPC-H SF {args.sf:g} (benchmarks/tpch_data.py, seed 0, customer as the unit): {g['rows']}")
            qs = tpch.workload(only, adapted=not args.no_adapted)
            pol = tpch_data.policy(os.path.join(tmp, "ledger_tpch.sqlite"))
            suites.append(("TPC-H DuckDB", run_suite("TPC-H DuckDB", db, pol, qs, args.runs,
                                                     plans=not args.no_plans, progress=say)))
            if args.postgres:
                import psycopg
                name = f"dpsql_budget_{os.getpid()}"
                with psycopg.connect(tpch.PG_SERVER, autocommit=True) as pg:
                    pg.execute(f"DROP DATABASE IF EXISTS {name}")
                    pg.execute(f"CREATE DATABASE {name}")
                dsn = tpch.PG_SERVER.rsplit("/", 1)[0] + "/" + name
                try:
                    tpch_data.copy_to_postgres(db, dsn)
                    pol = tpch_data.policy(os.path.join(tmp, "ledger_tpch_pg.sqlite"))
                    suites.append(("TPC-H PostgreSQL", run_suite("TPC-H PostgreSQL", dsn, pol, qs, args.runs,
                                                                 plain_engine="postgres", progress=say)))
                finally:
                    with psycopg.connect(tpch.PG_SERVER, autocommit=True) as pg:
                        pg.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if args.field_people > 0:
            field = _field_module()
            db = os.path.join(tmp, "field.duckdb")
            con = duckdb.connect(db)
            con.execute("SET enable_progress_bar = false")
            datagen.generate(con, args.field_people, seed=0)
            con.execute("CHECKPOINT")
            con.close()
            setup.append(f"- field benchmark: dpsql.datagen seed 0, {args.field_people:,} people, DuckDB, "
                         f"its policy (benchmarks/field/run.py dpsql_policy)")
            pol = field.dpsql_policy(Path(tmp) / "ledger_field.sqlite")
            qs = [(k, sql) for k, (_, sql) in field.QUERIES.items()]
            suites.append(("field DuckDB", run_suite("field DuckDB", db, pol, qs, args.runs,
                                                     plans=not args.no_plans, progress=say)))
    text = ["# Time budget per query", "", "Made by `python benchmarks/time_budget.py` (see benchmarks/README.md). "
            "ms per stage, median of the runs; dpsql = Session.execute's wall time (all stages but encode); "
            "plain = the same SQL on the plain engine; ratio = dpsql / plain.", "", *setup, ""]
    for name, results in suites:
        for mode in MODES:
            text += [f"## {name}, {mode}", "", shares(results, mode), "", table(results, mode), ""]
    if not args.no_plans:
        text += [f"Engine plans (EXPLAIN ANALYZE of the plain query and of the rewritten SQL): "
                 f"{Path(args.plans_out).name}", ""]
    report = "\n".join(text)
    print(report)
    if args.out and args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report)
    if not args.no_plans and args.plans_out and args.plans_out != "-":
        plans = ["# Engine plans: plain query vs dpsql's rewritten SQL", "",
                 "DuckDB `EXPLAIN (ANALYZE, FORMAT JSON)`, summarised: the query's total time in the engine "
                 "(query.total_time); planning (binder, optimizer and physical planner); the operators' number and "
                 "summed own time; the rows scanned; and the three slowest operators (own time, output rows). "
                 "One execution each, after the timed runs. PostgreSQL (--postgres): `EXPLAIN (ANALYZE, FORMAT JSON)`, "
                 "total = planning + execution time, operators' time = execution time, each node's own time = its "
                 "actual total time less its children's, times its loops (so a node run by parallel workers "
                 "can show more than the query's total).",
                 ""]
        for name, results in suites:
            if any("plan_plain" in r for r in results):
                plans += [f"## {name}", "", plans_report(results), ""]
        Path(args.plans_out).write_text("\n".join(plans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
