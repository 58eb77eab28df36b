"""Ledger benchmark: durable budget charges per second from N concurrent threads (group commit).

    python benchmarks/ledger_charges.py [--seconds 3] [--threads 1,16,64] [--processes 1]

Each thread charges one analyst (epsilon 1e-6 against an unlimited budget) on its own Ledger of
one file in a temporary directory (as the proxy's sessions do), for --seconds; prints charges/s,
p50/p99 latency of charge() and, when the ledger groups commits, the mean charges per COMMIT.
Run it with another checkout first on PYTHONPATH to compare ledgers on the same disk.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from dpsql import ledger as ledger_mod
from dpsql.ledger import Ledger

try:
    from dpsql.ledger.group_commit import Group
except ImportError:     # a dpsql without group commit (for A/B runs)
    Group = None


def run(path: Path, threads: int, seconds: float) -> dict:
    ledgers = [Ledger(path) for _ in range(threads)]
    lats: list[list[float]] = [[] for _ in range(threads)]
    batches: list[int] = []
    group = Group
    if group is not None:
        group.on_commit = lambda phase, ids: batches.append(len(ids)) if phase == "committed" else None
    start = threading.Barrier(threads + 1)
    stop = [0.0]

    def work(i: int) -> None:
        led, mine = ledgers[i], lats[i]
        start.wait()
        while (t0 := time.perf_counter()) < stop[0]:
            led.charge("bench", 1e-6, 0.0, epsilon_total=float("inf"), delta_total=1.0,
                       mechanism="laplace", params={"scale": 1e6}, query="SELECT COUNT(*) FROM t")
            mine.append(time.perf_counter() - t0)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    stop[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if group is not None:
        group.on_commit = None
    for led in ledgers:
        led.close()
    lat = sorted(x for xs in lats for x in xs)
    return {"cps": len(lat) / elapsed, "p50": statistics.median(lat) * 1000,
            "p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))] * 1000,
            "batch": sum(batches) / len(batches) if batches else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", default="1,16,64")
    args = ap.parse_args()
    print(f"ledger module: {ledger_mod.__file__}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| threads | charges/s | p50 ms | p99 ms | charges per COMMIT |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=os.environ.get("LEDGER_BENCH_DIR")) as d:
        for n in (int(x) for x in args.threads.split(",")):
            r = run(Path(d) / f"ledger{n}.sqlite", n, args.seconds)
            batch = f"{r['batch']:.1f}" if r["batch"] else "1 (no group commit)"
            print(f"| {n} | {r['cps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {batch} |", flush=True)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
