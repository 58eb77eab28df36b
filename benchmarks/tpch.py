"""TPC-H through dpsql: which of the 22 queries it answers as written, whether the answers are
right, how accurate they are at epsilon 0.8, and what it costs in time against the plain engine.

    python benchmarks/tpch.py --sf 0.1 --engines duckdb,postgres --runs 10

For each query and engine:
* answered / refused (the refusal's first line) / internal error;
* correctness at epsilon 1e9 (basic accountant, a huge budget, no answer cache, no release
  timing): every released row is matched to the plain engine's answer of the same SQL (its final
  LIMIT removed) by its group keys (the select items without an aggregate), and each value must be
  within 10 x its own claimed 95% half-width (cur.half_widths) + 1e-9 relative + 1e-6 absolute.
  A released group the plain answer lacks must be ~0 (an empty group of a public domain; a
  quotient there, whose half-width dpsql leaves NULL, may be anything). Without a
  LIMIT, every plain group must be released; with one, as many as the plain answer has up to it.
  Under partition selection (non-public keys) unreleased groups are allowed and counted.
  Queries on public tables only pass through: their rows must equal the plain rows exactly.
* accuracy: the median over `runs` runs at epsilon 0.8 of the median over released cells of
  |noisy - true| / |true| (cells whose true value is 0 are left out);
* time: the median wall time (execute + fetchall) of dpsql at epsilon 0.8 and of the plain engine
  on the same SQL, interleaved in the same runs, and their ratio.

Data: benchmarks/tpch_data.py (a seeded TPC-H-shaped generator inside DuckDB, whose customer-unit
policy's limits the data respect). Queries: benchmarks/tpch_queries.py.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tpch_data  # noqa: E402
from tpch_queries import ADAPTED, QUERIES  # noqa: E402

import dpsql  # noqa: E402
from dpsql.engines.duckdb import LOCKED_CONFIG  # noqa: E402

PG_SERVER = os.environ.get("DPSQL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BIG_EPS = 1e9
TOL_FACTOR = 10


# --- helpers -----------------------------------------------------------------------------------

def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _strip_limit(sql: str) -> tuple[str, int | None]:
    m = re.search(r"\s+limit\s+(\d+)\s*$", sql, flags=re.I)
    return (sql[:m.start()], int(m.group(1))) if m else (sql, None)


def _value_columns(sql: str) -> list[bool]:
    """Per select item of the outermost query: does it contain an aggregate (a released value)?"""
    tree = sqlglot.parse_one(sql, read="postgres")
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    return [e.find(exp.AggFunc) is not None for e in select.expressions]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    return None


def _norm(v: Any) -> str:
    f = _num(v)
    if f is not None:
        return repr(int(f)) if f.is_integer() and abs(f) < 2 ** 53 else repr(f)
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    return "NULL" if v is None else str(v).rstrip()


class Plain:
    """The plain engine, read-only."""

    def __init__(self, engine: str, target: str):
        self.engine = engine
        if engine == "duckdb":
            self.con = duckdb.connect(target, read_only=True, config=dict(LOCKED_CONFIG))
        else:
            import psycopg
            self.con = psycopg.connect(target, autocommit=True)

    def run(self, sql: str) -> list[tuple]:
        if self.engine == "duckdb":
            return self.con.execute(sql).fetchall()
        with self.con.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()

    def close(self) -> None:
        self.con.close()


def _dpsql(target: str, policy: dict[str, Any], epsilon: float):
    conn = dpsql.connect(target, policy=policy, analyst="a")
    conn.cursor().execute(f"SET dpsql.epsilon = {epsilon}")
    return conn


def _release(conn, sql: str) -> tuple[list[tuple], list[tuple] | None, bool, bool]:
    """The released rows, their half-widths, whether partition selection may have dropped
    groups (cur.suppressed is None then: a group of one customer is never released), and whether
    the query was private (charged) rather than passed through (public tables only)."""
    cur = conn.cursor()
    cur.execute(sql)
    rows = cur.fetchall()
    cost = cur.cost
    return rows, cur.half_widths, getattr(cur, "suppressed", 0) is None, bool(cost and cost.epsilon > 0)


# --- one query ---------------------------------------------------------------------------------

def check(sql: str, rows: list[tuple], widths: list[tuple] | None, truth: list[tuple],
          limit: int | None, selected: bool = False, private: bool = True) -> str:
    """'right' or 'WRONG (detail)': the released rows against the plain rows of the same SQL
    without its LIMIT."""
    is_value = _value_columns(sql)
    if len(is_value) != (len(rows[0]) if rows else len(is_value)):
        return f"WRONG (released {len(rows[0])} columns, the query has {len(is_value)})"
    if not any(is_value) or not private:       # passed through: exactly the plain rows
        got = sorted(tuple(map(_norm, r)) for r in rows)
        want = sorted(tuple(map(_norm, r)) for r in truth)
        if limit is not None:
            want_set = set(want)
            bad = [r for r in got if r not in want_set]
            if bad or len(got) != min(limit, len(want)):
                return f"WRONG ({len(got)} rows, {len(bad)} not in the plain answer; first {bad[:1]})"
            return "right"
        if got != want:
            diff = [r for r in got if r not in set(want)][:1] or [r for r in want if r not in set(got)][:1]
            return f"WRONG ({len(got)} rows against {len(want)}; e.g. {diff})"
        return "right"
    keys = [i for i, v in enumerate(is_value) if not v]
    vals = [i for i, v in enumerate(is_value) if v]
    want: dict[tuple, tuple] = {}
    for r in truth:
        want[tuple(_norm(r[i]) for i in keys)] = r
    seen = set()
    for r, hw in zip(rows, widths or []):
        k = tuple(_norm(r[i]) for i in keys)
        w = want.get(k)
        for i in vals:
            g = _num(r[i])
            t = _num(w[i]) if w is not None else 0.0
            h = hw[i] or 0.0
            if t is None and g is not None and hw[i] is not None:
                t = 0.0     # SUM over no rows: NULL in SQL, a noisy 0 from dpsql (emptiness is not released)
            if g is None or t is None:
                if (g is None) != (t is None) and not (w is None and g is None):
                    return f"WRONG (group {k}, column {i + 1}: got {r[i]!r}, want {w[i] if w else None!r})"
                continue
            if w is None and hw[i] is None:
                continue        # an empty group's quotient (no plain row): undefined, no claimed width
            tol = TOL_FACTOR * h + 1e-9 * abs(t) + 1e-6
            if abs(g - t) > tol:
                what = "want" if w is not None else "group not in the plain answer, want about"
                return (f"WRONG (group {k}, column {i + 1}: got {g:.6g}, {what} {t:.6g}, "
                        f"claimed half-width {h:.3g})")
        seen.add(k)
    if selected:        # partition selection: missing groups are allowed, and counted
        return "right" if len(seen) == len(want) else f"right ({len(seen)} of {len(want)} groups released)"
    if limit is None:
        missing = [k for k in want if k not in seen]
        if missing:
            return f"WRONG ({len(missing)} of {len(want)} plain groups not released, e.g. {missing[0]})"
    elif len(rows) != min(limit, len(want)):
        return f"WRONG ({len(rows)} rows released, the plain answer has {min(limit, len(want))})"
    return "right"


def errors(sql: str, rows: list[tuple], truth: list[tuple]) -> list[float]:
    """|noisy - true| / |true| of every released cell whose group the plain answer has."""
    is_value = _value_columns(sql)
    keys = [i for i, v in enumerate(is_value) if not v]
    vals = [i for i, v in enumerate(is_value) if v]
    want = {tuple(_norm(r[i]) for i in keys): r for r in truth}
    out = []
    for r in rows:
        w = want.get(tuple(_norm(r[i]) for i in keys))
        if w is None:
            continue
        for i in vals:
            g, t = _num(r[i]), _num(w[i])
            if g is not None and t is not None and t != 0:
                out.append(abs(g - t) / abs(t))
    return out


def run_query(q: str, sql: str, plain: Plain, exact, noisy, runs: int) -> dict[str, Any]:
    res: dict[str, Any] = {"q": q}
    unlimited, limit = _strip_limit(sql)
    try:
        truth = plain.run(unlimited)
    except Exception as e:      # noqa: BLE001
        res.update(status="plain engine failed", detail=_first_line(e))
        return res
    res["groups"] = len(truth)
    try:
        rows, widths, selected, private = _release(exact, sql)
    except dpsql.QueryRejected as e:
        res.update(status="refused", detail=_first_line(e))
        return res
    except Exception as e:      # noqa: BLE001
        res.update(status="internal error", detail=f"{type(e).__name__}: {_first_line(e)}")
        return res
    verdict = check(sql, rows, widths, truth, limit, selected, private)
    res.update(status="answered", verdict=verdict, released=len(rows))
    errs, t_dp, t_plain, failures = [], [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        plain.run(sql)
        t_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        try:
            rows, _, _, _ = _release(noisy, sql)
        except Exception as e:  # noqa: BLE001
            failures.append(_first_line(e))
            continue
        t_dp.append(time.perf_counter() - t0)
        cells = errors(sql, rows, truth)
        if cells:
            errs.append(statistics.median(cells))
    res["rel_error"] = statistics.median(errs) if errs else None
    res["t_dpsql"] = statistics.median(t_dp) if t_dp else None
    res["t_plain"] = statistics.median(t_plain)
    if failures:
        res["verdict"] += f"; {len(failures)} of {runs} runs at epsilon 0.8 failed: {failures[0]}"
    return res


# --- the whole benchmark -----------------------------------------------------------------------

def workload(only: list[int] | None = None, *, adapted: bool = True) -> list[tuple[str, str]]:
    """(label, SQL): Q1..Q22 as written, then Q<n>a, the adapted forms (tpch_queries.ADAPTED)."""
    out = [(f"Q{q}", sql) for q, sql in QUERIES.items() if only is None or q in only]
    if adapted:
        out += [(f"Q{q}a", sql) for q, sql in ADAPTED.items() if only is None or q in only]
    return out


def run(db_path: str, engine: str, *, runs: int, workdir: str, pg_dsn: str | None = None,
        queries: list[tuple[str, str]] | None = None, epsilon: float = 0.8,
        integral: bool = False, progress=None, make_policy=None) -> list[dict[str, Any]]:
    """make_policy(ledger, integral=...) -> the policy (default: tpch_data.policy, customer as the unit)."""
    queries = queries if queries is not None else workload()
    make_policy = make_policy or tpch_data.policy
    target = db_path if engine == "duckdb" else pg_dsn
    pol_exact = make_policy(os.path.join(workdir, f"ledger_{engine}_exact.sqlite"), integral=integral)
    pol_noisy = make_policy(os.path.join(workdir, f"ledger_{engine}_noisy.sqlite"), integral=integral)
    plain = Plain(engine, target)
    exact = _dpsql(target, pol_exact, BIG_EPS)
    noisy = _dpsql(target, pol_noisy, epsilon)
    out = []
    try:
        for q, sql in queries:
            t0 = time.perf_counter()
            r = run_query(q, sql, plain, exact, noisy, runs)
            r["engine"] = engine
            out.append(r)
            if progress:
                progress(f"{q} {engine}: {r['status']} {r.get('verdict') or r.get('detail', '')} "
                         f"({time.perf_counter() - t0:.1f} s)")
    finally:
        exact.close()
        noisy.close()
        plain.close()
    return out


def _fmt_t(t: float | None) -> str:
    return "" if t is None else f"{t * 1000:.1f}"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| query | engine | status | correctness at eps 1e9 | median rel. error at eps 0.8 | "
             "dpsql ms | plain ms | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        status = r["status"]
        if status != "answered":
            detail = r.get("detail", "").replace("|", "\\|")
            lines.append(f"| {r['q']} | {r['engine']} | {status} | {detail} | | | | |")
            continue
        err = "" if r.get("rel_error") is None else f"{r['rel_error']:.3g}"
        ratio = "" if not r.get("t_dpsql") else f"{r['t_dpsql'] / r['t_plain']:.1f}"
        verdict = r["verdict"].replace("|", "\\|")
        lines.append(f"| {r['q']} | {r['engine']} | answered | {verdict} | {err} | {_fmt_t(r.get('t_dpsql'))} | "
                     f"{_fmt_t(r['t_plain'])} | {ratio} |")
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for engine in dict.fromkeys(r["engine"] for r in results):
        for kind, rs in (("as written", [r for r in results if r["engine"] == engine and r["q"][-1] != "a"]),
                         ("adapted", [r for r in results if r["engine"] == engine and r["q"][-1] == "a"])):
            if not rs:
                continue
            answered = sum(r["status"] == "answered" for r in rs)
            wrong = sum(r["status"] == "answered" and not r["verdict"].startswith("right") for r in rs)
            internal = sum(r["status"] == "internal error" for r in rs)
            out.append(f"{engine}: answered {kind}: {answered} of {len(rs)}, wrong: {wrong}, "
                       f"internal errors: {internal}")
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--engines", default="duckdb")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", default="", help="comma-separated query numbers (default: all 22)")
    ap.add_argument("--integral-bounds", action="store_true",
                    help="widen the fractional bounds to whole numbers (see tpch_data.policy)")
    ap.add_argument("--no-adapted", action="store_true", help="only the queries as written")
    ap.add_argument("--db", help="the DuckDB file (generated when absent; default: a temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unit", choices=["customer", "supplier"], default="customer",
                    help="the privacy unit: customer (orders and lineitem carry it) or supplier (partsupp "
                         "and lineitem carry it; its limits read from the data)")
    ap.add_argument("--out", default=str(HERE / "results" / "tpch.md"))
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    only = [int(q) for q in args.queries.split(",")] if args.queries else None
    qs = workload(only, adapted=not args.no_adapted)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="dpsql_tpch_") as tmp:
        db = args.db or os.path.join(tmp, "tpch.duckdb")
        setup = [f"- scale factor {args.sf:g}, seed {args.seed}, dpsql commit {_commit()}, "
                 f"{os.cpu_count()} cores (shared), DuckDB {duckdb.__version__}"]
        if not os.path.exists(db):
            g = tpch_data.generate(db, args.sf, seed=args.seed, threads=args.threads)
            say(f"generated SF {args.sf:g} in {g['seconds']:.1f} s: {g['rows']}")
            setup.append(f"- generation in DuckDB: {g['seconds']:.1f} s; rows {g['rows']}")
        con = duckdb.connect(db, read_only=True)
        if args.unit == "supplier":
            slimits = tpch_data.supplier_limits(con)
            make_policy = lambda ledger, integral=False: tpch_data.supplier_policy(  # noqa: E731
                ledger, slimits, integral=integral)
        else:
            make_policy = tpch_data.policy
        bad = tpch_data.check_bounds(con, make_policy(os.path.join(tmp, "x.sqlite")))
        con.close()
        if bad:
            say("the data break the policy: " + "; ".join(bad))
            return 1
        results = []
        for engine in engines:
            dsn = None
            if engine == "postgres":
                import psycopg
                name = f"dpsql_tpch_{str(args.sf).replace('.', '_')}_{os.getpid()}"
                with psycopg.connect(PG_SERVER, autocommit=True) as pg:
                    pg.execute(f"DROP DATABASE IF EXISTS {name}")
                    pg.execute(f"CREATE DATABASE {name}")
                dsn = PG_SERVER.rsplit("/", 1)[0] + "/" + name
                secs = tpch_data.copy_to_postgres(db, dsn)
                setup.append(f"- copied to PostgreSQL ({name}) in {secs:.1f} s")
                say(f"copied to PostgreSQL in {secs:.1f} s")
            try:
                results += run(db, engine, runs=args.runs, workdir=tmp, pg_dsn=dsn, queries=qs, integral=args.integral_bounds,
                               progress=say, make_policy=make_policy)
            finally:
                if dsn is not None:
                    with psycopg.connect(PG_SERVER, autocommit=True) as pg:
                        pg.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    pol = make_policy("ledger", integral=args.integral_bounds)
    limits = ", ".join(f"{t}: rows {p['max_rows_per_unit']}, groups {p['max_groups_per_unit']}"
                       for t, p in pol["tables"].items())
    carriers = ("supplier (s_suppkey); partsupp by ps_suppkey; lineitem by l_suppkey" if args.unit == "supplier"
                else "customer (c_custkey); orders by o_custkey; lineitem by its link to orders")
    setup += [f"- privacy unit: {carriers}; public: {', '.join(pol['public']['tables'])}",
              "- bounds: " + ", ".join(f"{c} [{s['lower']}, {s['upper']}]" for t in pol["tables"].values()
                                        for c, s in t["columns"].items() if "lower" in s)
              + (" (fractional bounds widened to whole numbers: --integral-bounds)" if args.integral_bounds else ""),
              f"- contribution limits: {limits} " + (
                  "(the data's own maxima per supplier)" if args.unit == "supplier" else
                  f"(the data respect them: at most {tpch_data.MAX_ORDERS} orders of "
                  f"at most {tpch_data.MAX_LINES} lines per customer)"),
              f"- correctness at epsilon {BIG_EPS:g}; accuracy and time at epsilon 0.8 (Laplace), "
              f"median of {args.runs} runs; basic accountant, no answer cache, no release timing"]
    text = "\n".join(["# TPC-H through dpsql", "", *setup, "", *[f"**{s}**" for s in summary(results)], "",
                      table(results), ""])
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
