"""Heavy-query benchmark: the work one query can demand (issue 31).

    python benchmarks/heavy_query.py [--seconds 8] [--scalar-sample 20000] [--out benchmarks/results/heavy_query.md]

Two parts, on the bundled demo's database (dpsql.demo, copied to a temporary directory) and its
policy with a generous budget, the repeat-answer cache off, [timing] off (its 0.1 s floor would
hide dpsql's own latency), max_released_rows at its ceiling (1,000,000), [server]
max_concurrent_queries 16 (the nine clients below are one analyst) and the work limits at their
defaults:

1. The release stage, before and after dpsql.noise.vector, for 10^4, 10^5 and 10^6 groups:
   COUNT (one discrete-Gaussian value per group, the demo's default mechanism at epsilon 0.5) and
   8 quantiles (8 exponential-mechanism choices per group over histograms of 1 to 4 non-empty
   bins, as the demo's WIDTH_BUCKET groups have). "Before" is the per-group scalar release the
   Session ran until now (Fraction conversion, mechanism.release / QuantileEM.release), timed on
   --scalar-sample groups and scaled linearly beyond (marked ~); "after" is the batch release,
   timed in full. Both from the CSPRNG (SecureRng). Beside each, the whole query's time
   in-process (dpsql.connect, the demo's WIDTH_BUCKET(age) x WIDTH_BUCKET(income) GROUP BY) where
   the policy's limits allow it, and which limit refuses it where they do not.

2. `dpsql serve` (one process, DuckDB backend, trust auth on loopback): 8 light clients, each
   running `SELECT COUNT(*) FROM people WHERE age > k` in a loop for --seconds, first alone, then
   beside one client running a heavy query in a loop (COUNT over 10^6 WIDTH_BUCKET groups); the
   light clients' p50 and p95 latency in each phase and their ratio, and the heavy query's times.

The machine's load average is printed before and after; the machine has 2 cores shared with
other work, so figures move by tens of percent between runs.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import psycopg

import dpsql
from dpsql.demo import ensure_demo
from dpsql.noise import SecureRng, make_mechanism, vector
from dpsql.noise.exponential import QuantileEM

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "heavy_query.md"
SIZES = (10_000, 100_000, 1_000_000)
QS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
LIGHT_CLIENTS = 8


def _policy(tmp: Path) -> Path:
    _, demo_policy = ensure_demo()
    text = demo_policy.read_text()
    text = text.replace("epsilon = 10.0", "epsilon = 1000000000.0", 1)
    text = text.replace('ledger = "budget.sqlite"', f'ledger = "{tmp / "budget.sqlite"}"', 1)
    text += ('\n[reconstruction]\ncache_lifetime = 0\n\n[timing]\nquantum = 0\nfloor = 0\n\n'
             '[limits]\nmax_released_rows = 1000000\n\n[server]\nauth = "trust"\nmax_concurrent_queries = 16\n')
    path = tmp / "policy.toml"
    path.write_text(text)
    return path


def _side(groups: int) -> int:
    """n with (n + 1)^2 about groups: over the demo's bounds (age 0..120, income 0..500000, both
    starting at the buckets' low end and reaching past their high end) WIDTH_BUCKET(x, lo, hi, n)
    has the n + 1 values 1 .. n + 1 (EXPLAIN DP shows the derived domains)."""
    return round(groups ** 0.5) - 1


def _heavy_sql(n: int, quantiles: bool) -> str:
    aggs = (", ".join(f"PERCENTILE_CONT({q}) WITHIN GROUP (ORDER BY income)" for q in QS) if quantiles
            else "COUNT(*)")
    return (f"SELECT WIDTH_BUCKET(age, 0, 100, {n}) AS a, WIDTH_BUCKET(income, 0, 200000, {n}) AS b, {aggs} "
            "FROM people GROUP BY 1, 2")


# --- part 1: the release stage ------------------------------------------------------------

def _count_inputs(groups: int) -> list[int]:
    r = random.Random(1)
    return [r.choice((0, 0, 1, 1, 2, 3, 5, 8)) for _ in range(groups)]


def _hist_inputs(groups: int) -> list[str | None]:
    r = random.Random(2)
    out = []
    for _ in range(groups):
        k = r.choice((0, 1, 1, 2, 3, 4))
        bins = sorted(r.sample(range(1024), k))
        out.append(",".join(f"{b}:{r.randint(1, 3)}" for b in bins) or None)
    return out


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def release_stage(sample: int, log) -> list[dict]:
    rng = SecureRng()
    mech = make_mechanism("gaussian", 1.0, 0.5, 1e-6)          # a COUNT at the demo's defaults
    ems = [QuantileEM(0.5 / 8, Fraction(str(q)), Fraction(0), Fraction(500000)) for q in QS]
    rows = []
    for groups in SIZES:
        counts, hists = _count_inputs(groups), _hist_inputs(groups)
        m = min(groups, sample)

        def scalar_count():
            for v in counts[:m]:
                mech.release(Fraction(v), rng)

        def scalar_q():
            for em in ems:
                for h in hists[:m]:
                    em.release(h, rng)

        def vector_count():
            for at in range(0, groups, vector.BATCH):
                vector.release_values(mech, counts[at:at + vector.BATCH], rng)

        def vector_q():
            for em in ems:
                for at in range(0, groups, vector.BATCH):
                    vector.release_quantiles(em, hists[at:at + vector.BATCH], rng)

        for kind, sc, vc in (("COUNT", scalar_count, vector_count), ("8 quantiles", scalar_q, vector_q)):
            before = _time(sc) * groups / m
            after = _time(vc)
            rows.append({"groups": groups, "kind": kind, "before": before, "scaled": m < groups, "after": after})
            log(f"release {kind} {groups}: before {before:.2f}s{' (scaled)' if m < groups else ''}, after {after:.3f}s")
    return rows


def whole_queries(db: str, policy: Path, log) -> dict:
    conn = dpsql.connect(db, policy=str(policy), analyst="bench")
    cur = conn.cursor()
    out = {}
    for groups in SIZES:
        n = _side(groups)
        for quantiles in (False, True):
            sql = _heavy_sql(n, quantiles)
            t0 = time.perf_counter()
            try:
                cur.execute(sql)
                got = f"{time.perf_counter() - t0:.2f} s ({len(cur.fetchall())} rows)"
            except dpsql.QueryRejected as err:
                got = "refused: " + str(err).split("(the policy's ")[1].rstrip(")")
            out[(groups, quantiles)] = got
            log(f"query {'8q' if quantiles else 'count'} {groups}: {got}")
    conn.close()
    return out


# --- part 2: the proxy ----------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_proxy(db: str, policy: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", db,
                             "--policy", str(policy), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "dpsql serving" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, port
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("dpsql serve did not start: " + (proc.stderr.read() or "")[-2000:])


def _light(port: int, seconds: float, start: threading.Barrier, out: list) -> None:
    with psycopg.connect(f"postgresql://bench@127.0.0.1:{port}/demo", autocommit=True) as c:
        cur = c.cursor()
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 1")       # warm: plan cached
        start.wait()
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            t0 = time.perf_counter()
            cur.execute(f"SELECT COUNT(*) FROM people WHERE age > {k % 100}")
            cur.fetchall()
            out.append(time.perf_counter() - t0)
            k += 1


def _heavy(port: int, sql: str, stop: threading.Event, started: threading.Event, times: list) -> None:
    with psycopg.connect(f"postgresql://bench@127.0.0.1:{port}/demo", autocommit=True) as c:
        cur = c.cursor()
        while not stop.is_set():
            started.set()
            t0 = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            times.append(time.perf_counter() - t0)


def _phase(port: int, seconds: float, heavy_sql: str | None) -> tuple[list, list]:
    lat: list[float] = []
    heavy_times: list[float] = []
    stop, started = threading.Event(), threading.Event()
    h = None
    if heavy_sql is not None:
        h = threading.Thread(target=_heavy, args=(port, heavy_sql, stop, started, heavy_times))
        h.start()
        started.wait(60)
        time.sleep(0.5)                             # its first query is in the engine or the release
    start = threading.Barrier(LIGHT_CLIENTS)
    per = [[] for _ in range(LIGHT_CLIENTS)]
    threads = [threading.Thread(target=_light, args=(port, seconds, start, per[i])) for i in range(LIGHT_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in per:
        lat += p
    if h is not None:
        stop.set()
        h.join()
    return lat, heavy_times


def proxy_part(db: str, policy: Path, seconds: float, log) -> dict:
    proc, port = _start_proxy(db, policy)
    try:
        heavy_sql = _heavy_sql(_side(1_000_000), False)
        base, _ = _phase(port, seconds, None)
        log(f"light alone: {len(base)} queries")
        loaded, heavy = _phase(port, seconds, heavy_sql)
        log(f"light beside heavy: {len(loaded)} queries, heavy {['%.2f' % t for t in heavy]}")
    finally:
        proc.terminate()
        proc.wait(30)
    return {"base": base, "loaded": loaded, "heavy": heavy, "heavy_sql": heavy_sql}


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.array(xs), p)) * 1000


def report(release: list[dict], queries: dict, proxy: dict, seconds: float, loads: tuple[str, str]) -> str:
    lines = ["# Heavy queries: the release in batches, limits, and the proxy beside one", "",
             "`python benchmarks/heavy_query.py` (benchmarks/heavy_query.py's docstring says what each figure is).",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"numpy {np.__version__}; load average before {loads[0]}, after {loads[1]}.", "",
             "## The release stage, before (scalar, per group) and after (dpsql.noise.vector)", "",
             "| groups | aggregates | before | after | speed-up | whole query now (in-process) |",
             "|---:|---|---:|---:|---:|---|"]
    for r in release:
        q = queries[(r["groups"], r["kind"] != "COUNT")]
        before = f"{'~' if r['scaled'] else ''}{r['before']:.2f} s"
        lines.append(f"| {r['groups']:,} | {r['kind']} | {before} | {r['after']:.2f} s | "
                     f"{r['before'] / r['after']:.0f}x | {q} |")
    lines += ["", "~: timed on a sample of groups and scaled linearly (the scalar release is per group).",
              "Whole query: the demo's WIDTH_BUCKET(age) x WIDTH_BUCKET(income) GROUP BY, engine, release,",
              "post-processing; refused ones name the policy limit that refuses them before any charge",
              "(defaults: max_released_cells 2,000,000, max_quantile_work 1,000,000).", "",
              f"## `dpsql serve`: {LIGHT_CLIENTS} light clients, alone and beside one heavy query", "",
              f"Light: `SELECT COUNT(*) FROM people WHERE age > k` in a loop, {seconds:g} s per phase, one "
              "server process. Heavy, in a loop meanwhile:", f"`{proxy['heavy_sql']}` (1,000,000 groups).", "",
              "| light clients | queries | p50 | p95 |", "|---|---:|---:|---:|"]
    b, lo = proxy["base"], proxy["loaded"]
    lines.append(f"| alone | {len(b)} | {_pct(b, 50):.1f} ms | {_pct(b, 95):.1f} ms |")
    lines.append(f"| beside the heavy query | {len(lo)} | {_pct(lo, 50):.1f} ms | {_pct(lo, 95):.1f} ms |")
    lines.append(f"| ratio | {len(lo) / max(len(b), 1):.2f} | {_pct(lo, 50) / _pct(b, 50):.2f}x | "
                 f"{_pct(lo, 95) / _pct(b, 95):.2f}x |")
    heavy = proxy["heavy"]
    lines += ["", f"Heavy query through the proxy: {len(heavy)} runs, "
              f"{', '.join(f'{t:.2f} s' for t in heavy)} (the client's execute and fetch of every row)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--scalar-sample", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)       # noqa: E731
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        demo_db, _ = ensure_demo()
        db = str(tmp / "demo.duckdb")
        shutil.copy(demo_db, db)
        policy = _policy(tmp)
        release = release_stage(args.scalar_sample, log)
        queries = whole_queries(db, policy, log)
        proxy = proxy_part(db, policy, args.seconds, log)
    load_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    text = report(release, queries, proxy, args.seconds, (load_before, load_after))
    print(text)
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
