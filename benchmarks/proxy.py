"""Proxy benchmark: what `dpsql serve` adds on top of dpsql, against direct PostgreSQL.

    python benchmarks/proxy.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--people 2000]
                               [--runs 300] [--seconds 5] [--out benchmarks/results/proxy.md]

One run measures, on the same small `people` table (dpsql.datagen, seed 0) and the same aggregate
queries, with one client (p50/p99 latency per query) and with 16 concurrent clients (throughput):

  (a) raw    psycopg straight to PostgreSQL running the analyst's aggregate: no privacy at all.
  (b) floor  psycopg straight to PostgreSQL running dpsql's rewritten SQL (EXPLAIN DP's
             rewritten_sql): the engine work dpsql cannot avoid.
  (c) proxy  psycopg to `dpsql serve` (a subprocess, trust auth on loopback) with the PostgreSQL
             backend: parse, analysis, rewrite, ledger charge, engine, noise, wire protocol.
  (d) dpsql  dpsql.connect in-process on the same backend: (c) - (d) is the proxy's own cost.

Every query carries a distinct literal per run (WHERE age > k) so no answer comes from dpsql's
repeat cache; the policy's budget is generous. The runs of one query are interleaved (a, b, c, d)
so load from other processes hits them alike. Throughput: 16 threads, each with its own
connection, for --seconds per configuration (for (d), 16 in-process sessions of one Backend).
Without a reachable PostgreSQL the benchmark uses the DuckDB backend and says so.
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg

import dpsql
from dpsql import datagen
from dpsql.demo import policy_toml

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "proxy.md"
CLIENTS = 16
P50_TARGET_MS = 1.0
THROUGHPUT_TARGET = 0.8

QUERIES = {
    "count": "SELECT COUNT(*) FROM people WHERE age > {k}",
    "avg_by_state": "SELECT state, AVG(income) FROM people WHERE age > {k} GROUP BY state",
    "sum_count": "SELECT SUM(income), COUNT(*) FROM people WHERE age > {k}",
}


def _policy(tmp: Path) -> tuple[dict, Path]:
    pol = datagen.demo_policy(str(tmp / "ledger.sqlite"), epsilon=1e9, delta=0.5, query_epsilon=0.1)
    path = tmp / "policy.toml"
    path.write_text(policy_toml(pol) + '\n[reconstruction]\ncache_lifetime = 0\n\n[server]\nauth = "trust"\n')
    pol["reconstruction"] = {"cache_lifetime": 0}
    return pol, path


def _make_postgres(dsn: str, people: int, tmp: Path) -> str:
    """A fresh database dpsql_bench_proxy with the people table; returns its URL."""
    from psycopg import sql
    db = tmp / "people.duckdb"
    con = duckdb.connect(str(db))
    datagen.generate(con, people, seed=0, primary_key_copy=False)
    rows = con.execute("SELECT person_id, age, income, state, sex, education FROM people").fetchall()
    con.close()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS dpsql_bench_proxy WITH (FORCE)")
        admin.execute("CREATE DATABASE dpsql_bench_proxy")
    from urllib.parse import urlsplit, urlunsplit
    url = urlunsplit(urlsplit(dsn)._replace(path="/dpsql_bench_proxy"))
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE people (person_id bigint NOT NULL, age integer, income double precision, "
                  "state text, sex text, education text)")
        c.execute("CREATE TABLE visits (visit_id bigint, person_id bigint NOT NULL, visit_date date, state text, "
                  "cost double precision, kind text)")
        with c.cursor().copy(sql.SQL("COPY people FROM STDIN")) as cp:
            for r in rows:
                cp.write_row(r)
        c.execute("ANALYZE people")
    return url


def _drop_postgres(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS dpsql_bench_proxy WITH (FORCE)")


def _make_duckdb(people: int, tmp: Path) -> str:
    path = tmp / "people.duckdb"
    con = duckdb.connect(str(path))
    datagen.generate(con, people, seed=0, primary_key_copy=False)
    con.close()
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_proxy(target: str, policy: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", target,
                             "--policy", str(policy), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "dpsql serving" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()   # keep the pipe drained
            return proc, port
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("dpsql serve did not start: " + (proc.stderr.read() or "")[-2000:])


def _rewritten(conn, q: str) -> str | None:
    cur = conn.cursor()
    cur.execute("EXPLAIN DP " + q)
    for row in cur.fetchall():
        if row[0] == "rewritten_sql":
            sql = row[-1]
            return None if "%(" in sql or "$" in sql else sql
    return None


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def measure_latency(kind: str, target: str, pol: dict, port: int, runs: int, log) -> dict:
    """Per query: {config: [seconds]} from one client, interleaved."""
    direct = psycopg.connect(target, autocommit=True) if kind == "postgres" else None
    raw_duck = duckdb.connect(target, read_only=True) if kind == "duckdb" else None
    proxy = psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=bench sslmode=disable", autocommit=True)
    inproc = dpsql.connect(target, policy=pol, analyst="bench_inproc")
    out = {}
    try:
        for name, template in QUERIES.items():
            floor_sql = _rewritten(inproc, template.format(k=0))
            times: dict[str, list[float]] = {"raw": [], "floor": [], "proxy": [], "dpsql": []}
            icur = inproc.cursor()

            def raw(sql: str):
                if direct is not None:
                    return direct.execute(sql).fetchall()
                return raw_duck.execute(sql).fetchall()

            tasks = {
                "raw": lambda k: raw(template.format(k=k)),
                "floor": (lambda k: raw(floor_sql.replace("age > 0", f"age > {k}"))) if floor_sql else None,
                "proxy": lambda k: proxy.execute(template.format(k=k)).fetchall(),
                "dpsql": lambda k: (icur.execute(template.format(k=k)), icur.fetchall()),
            }
            for k in range(-5, 0):          # warm-up
                for fn in tasks.values():
                    if fn is not None:
                        fn(k)
            order = list(tasks)
            for i in range(runs):
                k = i % 100
                for key in order[i % 4:] + order[:i % 4]:
                    fn = tasks[key]
                    if fn is None:
                        continue
                    t0 = time.perf_counter()
                    fn(k)
                    times[key].append(time.perf_counter() - t0)
            out[name] = times
            log(f"latency {name}: " + ", ".join(f"{k} {statistics.median(v) * 1000:.3f} ms"
                                                for k, v in times.items() if v))
    finally:
        proxy.close()
        inproc.close()
        if direct is not None:
            direct.close()
        if raw_duck is not None:
            raw_duck.close()
    return out


def measure_throughput(kind: str, target: str, pol: dict, port: int, seconds: float, log) -> dict[str, float]:
    """Queries per second with CLIENTS concurrent clients, per configuration (the count query)."""
    template = QUERIES["count"]
    probe = dpsql.connect(target, policy=pol, analyst="bench_probe")
    floor_sql = _rewritten(probe, template.format(k=0))
    probe.close()

    def direct_conn():
        if kind == "postgres":
            c = psycopg.connect(target, autocommit=True)
            return c, (lambda sql: c.execute(sql).fetchall()), c.close
        c = duckdb.connect(target, read_only=True)
        return c, (lambda sql: c.execute(sql).fetchall()), c.close

    def proxy_conn():
        c = psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=bench sslmode=disable", autocommit=True)
        return c, (lambda sql: c.execute(sql).fetchall()), c.close

    backend = dpsql.session.Backend(target, pol)

    def dpsql_conn():
        s = backend.session("bench_inproc")
        return s, s.execute, s.close

    configs = {"raw": (direct_conn, lambda k: template.format(k=k)),
               "floor": (direct_conn, lambda k: floor_sql.replace("age > 0", f"age > {k}")) if floor_sql else None,
               "proxy": (proxy_conn, lambda k: template.format(k=k)),
               "dpsql": (dpsql_conn, lambda k: template.format(k=k))}
    out = {}
    try:
        for key, cfg in configs.items():
            if cfg is None:
                continue
            opener, text = cfg
            conns = [opener() for _ in range(CLIENTS)]
            counts = [0] * CLIENTS
            start = threading.Barrier(CLIENTS + 1)
            stop_at = [0.0]

            def work(i: int) -> None:
                _, run, _ = conns[i]
                start.wait()
                k = i
                while time.perf_counter() < stop_at[0]:
                    run(text(k % 100))
                    counts[i] += 1
                    k += CLIENTS

            threads = [threading.Thread(target=work, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            stop_at[0] = time.perf_counter() + seconds
            t0 = time.perf_counter()
            start.wait()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            for _, _, close in conns:
                close()
            out[key] = sum(counts) / elapsed
            log(f"throughput {key}: {out[key]:.0f} queries/s")
    finally:
        backend.close()
    return out


def render(kind: str, people: int, lat: dict, thr: dict[str, float], argv: list[str]) -> str:
    ms = lambda xs: f"{statistics.median(xs) * 1000:.3f}" if xs else "n/a"          # noqa: E731
    p99 = lambda xs: f"{_pct(xs, 0.99) * 1000:.3f}" if xs else "n/a"               # noqa: E731
    lines = [
        "# Proxy benchmark: `dpsql serve` against direct " + ("PostgreSQL" if kind == "postgres" else "DuckDB"),
        "",
        f"`python benchmarks/{Path(__file__).name} {' '.join(argv)}`".replace(" `", "`"),
        "",
        f"Backend: {'PostgreSQL (' + _server_version() + ')' if kind == 'postgres' else 'DuckDB (no PostgreSQL reachable)'}; "
        f"people table of {people} rows; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}. One run; every ratio below is from this run.",
        "",
        "(a) raw: the aggregate straight on the backend; (b) floor: dpsql's rewritten SQL straight on the "
        "backend; (c) proxy: psycopg through `dpsql serve`; (d) dpsql: `dpsql.connect` in-process. "
        "(c) - (d) is the proxy's own cost.",
        "",
        "## One client: latency per query (ms)",
        "",
        "| query | raw p50 | floor p50 | proxy p50 | dpsql p50 | proxy - dpsql p50 | raw p99 | floor p99 | proxy p99 | dpsql p99 | target (< 1 ms added) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in lat.items():
        added = (statistics.median(t["proxy"]) - statistics.median(t["dpsql"])) * 1000
        lines.append(f"| {name} | {ms(t['raw'])} | {ms(t['floor'])} | {ms(t['proxy'])} | {ms(t['dpsql'])} | "
                     f"{added:.3f} | {p99(t['raw'])} | {p99(t['floor'])} | {p99(t['proxy'])} | {p99(t['dpsql'])} | "
                     f"{'met' if added < P50_TARGET_MS else '**missed**'} |")
    lines += ["", f"## {CLIENTS} concurrent clients: throughput (`count` query, queries/s)", "",
              "| raw | floor | proxy | dpsql in-process | proxy / dpsql | proxy / floor | proxy / raw | target (proxy >= 80% of dpsql) |",
              "|---|---|---|---|---|---|---|---|"]
    g = lambda k: thr.get(k)                                                          # noqa: E731
    f = lambda v: f"{v:.0f}" if v else "n/a"                                          # noqa: E731
    r = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"                             # noqa: E731
    ok = g("proxy") and g("dpsql") and g("proxy") / g("dpsql") >= THROUGHPUT_TARGET
    lines.append(f"| {f(g('raw'))} | {f(g('floor'))} | {f(g('proxy'))} | {f(g('dpsql'))} | {r(g('proxy'), g('dpsql'))} | "
                 f"{r(g('proxy'), g('floor'))} | {r(g('proxy'), g('raw'))} | {'met' if ok else '**missed**'} |")
    lines += ["", "Notes: every private query is charged in the SQLite ledger (a committed transaction) on both "
              "(c) and (d); (a) and (b) charge nothing. The proxy runs as its own process (`dpsql serve`), "
              "the clients as threads of the benchmark process.", ""]
    return "\n".join(lines)


_VERSION = ""


def _server_version() -> str:
    return _VERSION or "unknown"


def main(argv: list[str] | None = None) -> int:
    global _VERSION
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("DPSQL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--people", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)                     # noqa: E731
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        pol, pol_path = _policy(tmp)
        try:
            with psycopg.connect(args.dsn, connect_timeout=5) as c:
                _VERSION = c.info.parameter_status("server_version") or ""
            kind = "postgres"
            target = _make_postgres(args.dsn, args.people, tmp)
        except psycopg.Error as err:
            log(f"PostgreSQL unreachable ({err}); measuring against the DuckDB backend")
            kind, target = "duckdb", _make_duckdb(args.people, tmp)
        proc, port = _start_proxy(target, pol_path)
        try:
            lat = measure_latency(kind, target, pol, port, args.runs, log)
            thr = measure_throughput(kind, target, pol, port, args.seconds, log)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if kind == "postgres":
                _drop_postgres(args.dsn)
    report = render(kind, args.people, lat, thr, argv)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
