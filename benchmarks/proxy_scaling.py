"""Does `dpsql serve` scale with clients? Issue 33's four proxy questions, each measured in one run.

    python benchmarks/proxy_scaling.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres]
                                       [--seconds 8] [--out benchmarks/results/proxy_scaling.md]

On the people table of benchmarks/proxy.py (dpsql.datagen, 2,000 people, in a fresh PostgreSQL
database), every client sends `SELECT COUNT(*) FROM people WHERE age > k` with a k no client
has sent before (a new text: parsed, analysed, rewritten, charged and run each time; the
repeat-answer cache is off), for --seconds per configuration, through `dpsql serve` (its own
process, PostgreSQL backend, trust auth on loopback):

  1. new texts, 1 client against 16, the [timing] defence off and the per-analyst limit lifted:
     private queries/s; 16 clients' against 1 client's (target >= 5x) and against raw PostgreSQL
     with 16 clients running the same aggregate without privacy (target >= 20%).
  2. the same with `dpsql serve --workers 2`.
  3. the default [timing] defence (floor 0.1 s, quantum 0.05 s), 16 clients: each client can get
     at most 1 / floor = 10 answers/s, so 16 clients at most 160/s; target >= 90% of that (the
     release delay should cost latency, never throughput: a held answer holds no slot).
  4. as 3, with the default per-analyst limit ([server] max_concurrent_queries = 4) and the
     default [server] query_wait (30 s): 16 connections of one analyst, 4 queries at a time; the
     other statements wait in a queue, so errors must be 0.

All clients are one analyst (all charges on one running total, the ledger's hardest case).
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import proxy as bench  # noqa: E402  (benchmarks/proxy.py: the data, the server, CPU readings)

from dpsql import datagen  # noqa: E402
from dpsql.demo import policy_toml  # noqa: E402

QUERY = "SELECT COUNT(*) FROM people WHERE age > {k}"
FLOOR, QUANTUM = 0.1, 0.05          # the library's [timing] defaults (dpsql.policy)


def _policy(tmp: Path, name: str, *, timing: bool, limit: bool) -> Path:
    pol = datagen.demo_policy(str(tmp / f"ledger_{name}.sqlite"), epsilon=1e9, delta=0.5, query_epsilon=0.1)
    server = 'auth = "trust"\nmax_connections = 256\nmax_connections_per_analyst = 256\n'
    if not limit:
        server += "max_concurrent_queries = 128\n"
    text = policy_toml(pol) + "\n[reconstruction]\ncache_lifetime = 0\n\n[server]\n" + server
    if not timing:
        text += "\n[timing]\nquantum = 0\nfloor = 0\n"
    path = tmp / f"policy_{name}.toml"
    path.write_text(text)
    return path


def _run(connect, clients: int, seconds: float, fresh, pids) -> dict:
    """clients threads, each with its own connection, sending new texts for `seconds`."""
    conns = [connect() for _ in range(clients)]
    counts, errors = [0] * clients, [0] * clients
    lats: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]
    lock = threading.Lock()

    def work(i: int) -> None:
        c = conns[i]
        start.wait()
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at[0]:
                break
            with lock:
                k = next(fresh)
            try:
                c.execute(QUERY.format(k=k)).fetchall()
            except Exception:        # noqa: BLE001 -- counted and reported
                errors[i] += 1
            else:
                lats[i].append(time.perf_counter() - t0)
                counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    cpu0 = bench._cpu_seconds(pids)
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = bench._cpu_seconds(pids) - cpu0
    for c in conns:
        c.close()
    lat = sorted(x for xs in lats for x in xs)
    done = max(sum(counts), 1)
    return {"qps": sum(counts) / elapsed, "p50": statistics.median(lat) * 1000 if lat else float("nan"),
            "p99": bench._pct(lat, 0.99) * 1000 if lat else float("nan"), "errors": sum(errors),
            "cpu": cpu / done * 1000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--people", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--out", help="write the report to this Markdown file")
    args = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)   # noqa: E731
    load0 = os.getloadavg()
    fresh = itertools.count(1000)
    rows: list[tuple[str, int, dict]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        target = bench._make_postgres(args.dsn, args.people, tmp)
        try:
            def raw():
                return psycopg.connect(target, autocommit=True)

            def served(port):
                return lambda: psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=bench "
                                               "sslmode=disable", autocommit=True)
            pg = lambda: bench._backend_pids("postgres", target)     # noqa: E731
            configs = [("raw PostgreSQL, no privacy", False, False, 0),
                       ("proxy, new texts, timing off, no limit", False, False, 1),
                       ("proxy --workers 2, new texts, timing off, no limit", False, False, 2),
                       ("proxy, new texts, default timing, no limit", True, False, 1),
                       ("proxy, new texts, default timing, default limit (4) and queue", True, True, 1)]
            for name, timing, limit, workers in configs:
                if workers == 0:
                    for clients in (1, 16):
                        r = _run(raw, clients, args.seconds, fresh, [])
                        rows.append((name, clients, r))
                        log(f"{name}, {clients}: {r['qps']:.0f} q/s")
                    continue
                pol = _policy(tmp, f"{int(timing)}{int(limit)}{workers}", timing=timing, limit=limit)
                proc, port = bench._start_proxy(target, pol, workers)
                try:
                    conn = served(port)
                    for k in range(20):                     # warm-up: imports, the first plans
                        with conn() as c:
                            c.execute(QUERY.format(k=-k - 1)).fetchall()
                    own = bench._with_children(proc.pid)
                    for clients in ((1, 16) if not timing else (16,)):
                        r = _run(conn, clients, args.seconds, fresh, own + pg())
                        rows.append((name, clients, r))
                        log(f"{name}, {clients}: {r['qps']:.0f} q/s, p50 {r['p50']:.1f} ms, errors {r['errors']}")
                finally:
                    proc.terminate()
                    proc.wait(10)
        finally:
            bench._drop_postgres(args.dsn)
    load1 = os.getloadavg()
    q = {(n, c): r for n, c, r in rows}
    one = q[("proxy, new texts, timing off, no limit", 1)]["qps"]
    many = q[("proxy, new texts, timing off, no limit", 16)]["qps"]
    multi = q[("proxy --workers 2, new texts, timing off, no limit", 16)]["qps"]
    raw16 = q[("raw PostgreSQL, no privacy", 16)]["qps"]
    timed = q[("proxy, new texts, default timing, no limit", 16)]
    limited = q[("proxy, new texts, default timing, default limit (4) and queue", 16)]
    cap = 16 / FLOOR
    out = ["# Proxy scaling: new texts, 1 to 16 clients", "",
           f"`python benchmarks/proxy_scaling.py --seconds {args.seconds:g}` (see its docstring). PostgreSQL "
           f"backend, {args.people} people, {os.cpu_count()} cores ({platform.machine()}, shared), one run; "
           f"load average before {load0[0]:.2f}, after {load1[0]:.2f}. CPU ms/q: the proxy's processes and the "
           "PostgreSQL backends serving the run, per answered query.", "",
           "| configuration | clients | queries/s | p50 ms | p99 ms | CPU ms/q | errors |", "|---|---|---|---|---|---|---|"]
    for n, c, r in rows:
        cpu = f"{r['cpu']:.2f}" if not n.startswith("raw") else ""
        out.append(f"| {n} | {c} | {r['qps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {cpu} | {r['errors']} |")

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"
    out += ["", "| question | measured | target | |", "|---|---|---|---|",
            f"| 16 clients / 1 client (new texts) | {many / one:.2f}x | >= 5x | {verdict(many / one >= 5)} |",
            f"| 16 clients / raw PostgreSQL 16 clients | {many / raw16:.1%} | >= 20% | {verdict(many / raw16 >= 0.2)} |",
            f"| --workers 2 / 1 process, 16 clients | {multi / many:.2f}x | > 1 where there are cores | "
            f"{verdict(multi / many > 1)} |",
            f"| default timing, 16 clients / (16 x 1/floor = {cap:.0f}/s) | {timed['qps'] / cap:.1%} | >= 90% | "
            f"{verdict(timed['qps'] / cap >= 0.9)} |",
            f"| default limit 4 with 16 connections: errors, and / 160/s | {limited['errors']} errors, "
            f"{limited['qps'] / cap:.1%} | 0 errors (queued) | {verdict(limited['errors'] == 0)} |"]
    report = "\n".join(out) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
