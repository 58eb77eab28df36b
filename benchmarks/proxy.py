"""Proxy benchmark: what `dpsql serve` adds on top of dpsql, against direct PostgreSQL.

    python benchmarks/proxy.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--people 2000]
                               [--runs 300] [--seconds 5] [--out benchmarks/results/proxy.md]

One run measures, on the same small `people` table (dpsql.datagen, seed 0) and the same aggregate
queries, with one client (p50/p99 latency per query) and with 1, 16 and 64 concurrent clients
(throughput and p50/p99 latency of the `count` query):

  (a) raw    psycopg straight to PostgreSQL running the analyst's aggregate: no privacy at all.
  (b) floor  psycopg straight to PostgreSQL running dpsql's rewritten SQL (EXPLAIN DP's
             rewritten_sql): the engine work dpsql cannot avoid.
  (c) proxy  psycopg to `dpsql serve` (a subprocess, trust auth on loopback) with the PostgreSQL
             backend: parse, analysis, rewrite, ledger charge, engine, noise, wire protocol.
  (d) dpsql  dpsql.connect in-process on the same backend: (c) - (d) is the proxy's own cost.

Queries carry a literal (WHERE age > k, k cycling through 0..99) and the policy turns dpsql's
repeat-answer cache off (cache_lifetime = 0), so every private query is charged and run; the
policy's budget is generous. Plans are reused for repeated texts (each analyst's plans are shared
by the sessions of one server); the concurrency part warms them up (each text once, proxy and
in-process) and also measures the proxy with texts never sent before ("new texts": every query
parsed, analysed and rewritten). The runs of one query are interleaved (a, b, c, d)
so load from other processes hits them alike. Concurrency: N threads (N = 1, 16, 64), each with
its own connection, for --seconds per configuration (for (d), N in-process sessions of one Backend);
every client is the one analyst `bench` (all charges on one running total, the ledger's hardest
case), so the policy lifts [server] max_concurrent_queries and the connection limits above 64. The policy also turns the
[timing] defence off (quantum = floor = 0): with its defaults every private answer is held until
100 ms after the query began, which caps each client at 10 private queries/s whatever dpsql's own
speed; this benchmark measures dpsql's own speed. The machine's load average
is read before and after the run and printed with the results.
Without a reachable PostgreSQL the benchmark uses the DuckDB backend and says so.
"""
from __future__ import annotations

import argparse
import itertools
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
import dpsql.backend
from dpsql import datagen
from dpsql.demo import policy_toml

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "proxy.md"
CLIENTS = (1, 16, 64)
THROUGHPUT_CLIENTS = 16
PRIVATE_QPS_TARGET = 1500
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
    path.write_text(policy_toml(pol) + '\n[reconstruction]\ncache_lifetime = 0\n\n[server]\nauth = "trust"\n'
                    'max_concurrent_queries = 128\nmax_connections = 256\nmax_connections_per_analyst = 256\n\n'
                    '[timing]\nquantum = 0\nfloor = 0\n')
    pol["reconstruction"] = {"cache_lifetime": 0}
    pol["timing"] = {"quantum": 0, "floor": 0}
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


def _start_proxy(target: str, policy: Path, workers: int = 1) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.frontends.cli", "serve", "--backend", target,
                             "--policy", str(policy), "--listen", f"127.0.0.1:{port}", "--workers", str(workers)],
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
    """dpsql's rewritten SQL for q (EXPLAIN DP (SQL): one row per line of it), the bounding salt
    written in as a fixed literal (the work is the same for any salt); None if it has other
    parameters. (Before, this read the first line of EXPLAIN DP's rewritten_sql only: the "floor"
    ran `SELECT`, a no-op.)"""
    cur = conn.cursor()
    cur.execute("EXPLAIN DP (SQL) " + q)
    sql = "\n".join(row[0] for row in cur.fetchall())
    sql = sql.replace("%(salt)s", "1234567890123")
    if "%(" in sql or "$" in sql or not sql.lstrip().upper().startswith(("SELECT", "WITH")):
        return None
    return sql


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


def _cpu_seconds(pids) -> float:
    """user + system CPU seconds of these processes so far (Linux /proc; 0 where unreadable)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])       # utime, stime (clock ticks)
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _with_children(pid: int) -> list[int]:
    """A process and its children (`dpsql serve --workers N`: the supervisor and its workers)."""
    out = [pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _backend_pids(kind: str, target: str) -> list[int]:
    """PostgreSQL server processes serving the benchmark database (the clients of one config)."""
    if kind != "postgres":
        return []
    with psycopg.connect(target, autocommit=True) as c:
        return [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND pid <> pg_backend_pid()").fetchall()]


def measure_concurrency(kind: str, target: str, pol: dict, port: int, seconds: float, log,
                        server_pid: int | None = None, multi: tuple[int, int, int] | None = None) -> dict:
    """{clients: {config: {"qps", "lat": [seconds], "errors", "batches", "cpu"}}} for the count query.
    cpu: CPU milliseconds per query of dpsql's process (the proxy's, or this one for (d)) and of the
    PostgreSQL backends serving the config, measured over the run (load-independent, unlike q/s)."""
    try:
        from dpsql.ledger.group_commit import Group as group
    except ImportError:
        group = None     # a dpsql without group commit (for A/B runs)
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

    def engine_conn():
        """dpsql's PostgreSQL engine alone: BEGIN, LOCK, settings and the schema-facts check, the
        query, ROLLBACK (no analysis, ledger or noise)."""
        from dpsql.engines.postgres import PostgresEngine
        e = PostgresEngine(target)
        facts = e.facts(["people"])
        return e, (lambda sql: e.run(sql, expect=facts)), e.close

    def proxy_conn(port=port):
        c = psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=bench sslmode=disable", autocommit=True)
        return c, (lambda sql: c.execute(sql).fetchall()), c.close

    backend = dpsql.backend.Backend(target, pol)

    def dpsql_conn():
        s = backend.session("bench_inproc")
        return s, s.execute, s.close

    fresh = itertools.count(1000)      # literals no client has sent before: no query was planned before

    configs = {"raw": (direct_conn, lambda k: template.format(k=k)),
               "floor": (direct_conn, lambda k: floor_sql.replace("age > 0", f"age > {k}")) if floor_sql else None,
               "engine": (engine_conn, lambda k: floor_sql.replace("age > 0", f"age > {k}"))
               if floor_sql and kind == "postgres" else None,
               "proxy": (proxy_conn, lambda k: template.format(k=k)),
               "dpsql": (dpsql_conn, lambda k: template.format(k=k)),
               "proxy_new": (proxy_conn, lambda k: template.format(k=next(fresh))),
               "proxy_multi": ((lambda: proxy_conn(multi[1])), lambda k: template.format(k=k)) if multi else None}
    out: dict = {}
    batches: list[int] = []

    def count_batch(phase: str, ids: tuple) -> None:
        if phase == "committed":
            batches.append(len(ids))

    try:
        # Warm-up: each of the 100 texts once through the proxy and the in-process Backend (charged
        # like any query), so that both reuse their plans from the first configuration on.
        warm = [proxy_conn, dpsql_conn]
        if multi:       # each worker process plans the texts once (connections go to the workers in turn)
            warm += [lambda: proxy_conn(multi[1])] * multi[2]
        for opener in warm:
            _, run, close = opener()
            for k in range(100):
                run(template.format(k=k))
            close()
        for clients in CLIENTS:
            out[clients] = {}
            for key, cfg in configs.items():
                if cfg is None:
                    continue
                opener, text = cfg
                conns = [opener() for _ in range(clients)]
                counts = [0] * clients
                errors = [0] * clients
                lats: list[list[float]] = [[] for _ in range(clients)]
                start = threading.Barrier(clients + 1)
                stop_at = [0.0]

                def work(i: int) -> None:
                    _, run, _ = conns[i]
                    start.wait()
                    k = i
                    mine = lats[i]
                    while True:
                        t0 = time.perf_counter()
                        if t0 >= stop_at[0]:
                            break
                        try:
                            run(text(k % 100))
                        except Exception:     # noqa: BLE001 -- counted and reported, never hidden
                            errors[i] += 1
                        else:
                            mine.append(time.perf_counter() - t0)
                            counts[i] += 1
                        k += clients

                batches.clear()
                own = _with_children(multi[0]) if key == "proxy_multi" else \
                    [server_pid] if key.startswith("proxy") and server_pid else [os.getpid()] if key == "dpsql" else []
                pg = _backend_pids(kind, target)
                me = [os.getpid()] if key != "dpsql" else []
                cpu0 = (_cpu_seconds(own), _cpu_seconds(pg), _cpu_seconds(me))
                if group is not None:
                    group.on_commit = count_batch if key == "dpsql" else None
                threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
                for t in threads:
                    t.start()
                stop_at[0] = time.perf_counter() + seconds
                t0 = time.perf_counter()
                start.wait()
                for t in threads:
                    t.join()
                elapsed = time.perf_counter() - t0
                cpu1 = (_cpu_seconds(own), _cpu_seconds(pg), _cpu_seconds(me))
                if group is not None:
                    group.on_commit = None
                for _, _, close in conns:
                    close()
                lat = [x for xs in lats for x in xs]
                done = max(sum(counts), 1)
                out[clients][key] = {"qps": sum(counts) / elapsed, "lat": lat, "errors": sum(errors),
                                     "batches": list(batches) if key == "dpsql" else None,
                                     "cpu": ((cpu1[0] - cpu0[0]) / done * 1000 if own else None,
                                             (cpu1[1] - cpu0[1]) / done * 1000 if pg else None,
                                             (cpu1[2] - cpu0[2]) / done * 1000 if me else None)}
                log(f"{clients} clients, {key}: {out[clients][key]['qps']:.0f} queries/s, p50 "
                    f"{statistics.median(lat) * 1000 if lat else float('nan'):.3f} ms, errors {sum(errors)}"
                    + (f", mean batch {sum(batches) / len(batches):.1f}" if key == "dpsql" and batches else ""))
    finally:
        if group is not None:
            group.on_commit = None
        backend.close()
    return out


def render(kind: str, people: int, lat: dict, conc: dict, argv: list[str], load: tuple, workers: int = 0) -> str:
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
    lines += ["", "## Concurrent clients (`count` query): private queries/s and latency (ms)", "",
              "(a) and (b) charge nothing; engine: (b) through dpsql's PostgreSQL engine (its transaction: BEGIN, "
              "LOCK, settings, the schema-facts check, the query, ROLLBACK; no analysis, ledger or noise), from "
              "this process; (c) and (d) are private queries, each charged in the ledger. "
              "Batch: mean charges per ledger COMMIT in (d) (group commit; (c) batches alike in its own process). "
              "CPU ms/q: CPU time per answered query of the proxy process, of the PostgreSQL backends serving it, and "
              "of this process for (d) (which includes the client threads): unlike q/s, it does not depend on what "
              "else the machine runs. The clients cycle through 100 literals (`age > k`, k = 0..99), each sent once "
              "through the proxy and in-process before the first configuration, so their plans are reused "
              "(each analyst's plans are shared by the sessions of one server: `PlanCache`); \"new texts\": the "
              "proxy again, every query with a literal never sent before, so every query is parsed, analysed and "
              "rewritten. Every query is charged and run either way (the repeat-answer cache is off).",
              "",
              f"\"{workers} processes\": the proxy again, started as `dpsql serve --workers {workers}` (a supervisor "
              "handing connections to the worker processes in turn); its CPU is the supervisor's and the workers'. "
              "Client CPU: this process's (the client threads' psycopg work) per query. CPU ceiling: what this "
              f"machine's {os.cpu_count()} cores could answer at that configuration's measured CPU per query of "
              "proxy, PostgreSQL and client together (cores / CPU per query), whatever the number of processes."
              if workers else "",
              "",
              "| clients | raw q/s | floor q/s | engine q/s | proxy q/s | dpsql q/s | proxy p50 | proxy p99 | dpsql p50 | dpsql p99 "
              "| proxy - dpsql p50 | dpsql batch | proxy CPU ms/q | PG CPU ms/q (proxy) | PG CPU ms/q (engine) | dpsql CPU ms/q "
              "| proxy q/s, new texts | proxy p50, new texts | proxy CPU ms/q, new texts "
              + (f"| proxy q/s, {workers} processes | p50 | p99 | proxy CPU ms/q | PG CPU ms/q | client CPU ms/q "
                 f"| CPU ceiling q/s " if workers else "") + "| errors | target |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
              + ("---|" * 7 if workers else "")]
    def cpu(r: dict, i: int) -> str:
        v = (r.get("cpu") or (None, None))[i]
        return "n/a" if v is None else f"{v:.2f}"

    for clients, cfg in conc.items():
        g = lambda k, c=cfg: c.get(k, {})                                              # noqa: E731
        q = lambda k: f"{g(k)['qps']:.0f}" if g(k) else "n/a"                           # noqa: E731
        b = g("dpsql").get("batches") or []
        added = (statistics.median(g("proxy")["lat"]) - statistics.median(g("dpsql")["lat"])) * 1000 \
            if g("proxy").get("lat") and g("dpsql").get("lat") else float("nan")
        errs = sum(v["errors"] for v in cfg.values())
        if clients == THROUGHPUT_CLIENTS:
            best = max((g(k)["qps"] for k in ("proxy", "proxy_multi") if g(k)), default=0)
            target = f"proxy >= {PRIVATE_QPS_TARGET} q/s: {'met' if best >= PRIVATE_QPS_TARGET else '**missed**'}"
        else:
            target = ""
        lines.append(f"| {clients} | {q('raw')} | {q('floor')} | {q('engine')} | {q('proxy')} | {q('dpsql')} | "
                     f"{ms(g('proxy').get('lat'))} | {p99(g('proxy').get('lat'))} | {ms(g('dpsql').get('lat'))} | "
                     f"{p99(g('dpsql').get('lat'))} | {added:.3f} | {sum(b) / len(b) if b else float('nan'):.1f} | "
                     f"{cpu(g('proxy'), 0)} | {cpu(g('proxy'), 1)} | {cpu(g('engine'), 1)} | {cpu(g('dpsql'), 0)} | {q('proxy_new')} | "
                     f"{ms(g('proxy_new').get('lat'))} | {cpu(g('proxy_new'), 0)} | " + (_multi_cells(g("proxy_multi"))
                     if workers else "") + f"{errs} | {target} |")
    lines += ["", f"Load average (1, 5, 15 min) before the run: {load[0]}; after: {load[1]}.", "",
              "Notes: every private query is charged in the SQLite ledger (a committed, fsync'd transaction, "
              "shared by concurrent charges: group commit) on both (c) and (d); (a) and (b) charge nothing. "
              "The proxy runs as its own process (`dpsql serve`), the clients as threads of the benchmark "
              "process. The policy turns the [timing] defence off (quantum = floor = 0) to measure dpsql's own "
              "speed: with its defaults (answers held until 100 ms after the query began) each client gets at most "
              "10 private answers/s.", ""]
    return "\n".join(lines)


def _multi_cells(r: dict) -> str:
    if not r:
        return "n/a | " * 7
    c = r.get("cpu") or (None, None, None)
    total = sum(x for x in c if x is not None)
    ceiling = f"{(os.cpu_count() or 1) * 1000 / total:.0f}" if total else "n/a"
    f = lambda v: "n/a" if v is None else f"{v:.2f}"                           # noqa: E731
    return (f"{r['qps']:.0f} | {statistics.median(r['lat']) * 1000:.3f} | {_pct(r['lat'], 0.99) * 1000:.3f} | "
            f"{f(c[0])} | {f(c[1])} | {f(c[2])} | {ceiling} | ")


_VERSION = ""


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


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
    ap.add_argument("--skip-latency", action="store_true", help="only the concurrent-clients part (A/B runs)")
    ap.add_argument("--workers", type=int, default=2,
                    help="also measure `dpsql serve --workers N` under concurrent clients (0: not)")
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)                     # noqa: E731
    load_before = _load()
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
        multi = _start_proxy(target, pol_path, args.workers) if args.workers > 1 else None
        try:
            lat = {} if args.skip_latency else measure_latency(kind, target, pol, port, args.runs, log)
            conc = measure_concurrency(kind, target, pol, port, args.seconds, log, proc.pid,
                                       (multi[0].pid, multi[1], args.workers) if multi else None)
        finally:
            for p in (proc, multi[0] if multi else None):
                if p is not None:
                    p.terminate()
                    p.wait(timeout=30)
            if kind == "postgres":
                _drop_postgres(args.dsn)
    load = (load_before, _load())
    report = render(kind, args.people, lat, conc, argv, load, args.workers if args.workers > 1 else 0)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
