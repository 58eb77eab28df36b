"""Spark benchmark: the core workload (benchmarks/bench_core.py, Q1-Q6) on Spark local mode and on DuckDB.

    python benchmarks/spark.py [--sizes 10000000,50000000] [--repeat 3] [--master local[2]]
                               [--driver-memory 12g] [--out benchmarks/results/spark.md]

Data: dpsql.datagen (seed 0) through bench_core.ensure_data into benchmarks/.data/core_<N>.duckdb,
then `people` and `visits` written once by DuckDB's COPY to benchmarks/.data/spark_<N>/*.parquet
(git-ignored, reused). Per engine and query, the median wall-clock ms of --repeat runs after one warm-up:

  dpsql  cursor.execute(q); fetchall() through dpsql.connect: analysis, rewrite, ledger charge,
         the engine, noise. On Spark the policy's `source` names the Parquet files.
  raw    the analyst's query itself, no privacy (Spark: spark.sql over the same Parquet files).
  floor  DuckDB: bench_core's fastest verified hand-written variant; Spark: the same variants
         transpiled by sqlglot where they transpile (QUALIFY, arg_min and $salt are rewritten),
         else "-".
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import duckdb
import sqlglot

import dpsql

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "spark.md"


def _core():
    spec = importlib.util.spec_from_file_location("bench_core", HERE / "bench_core.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_core"] = mod
    spec.loader.exec_module(mod)
    return mod


core = _core()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ensure_parquet(people: int) -> dict[str, str]:
    db, made = core.ensure_data(people)
    log(f"{people:,} people: DuckDB data {'generated' if made else 'cached'} at {db}")
    out_dir = core.DATA_DIR / f"spark_{people}"
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {t: str(out_dir / f"{t}.parquet") for t in ("people", "visits")}
    con = duckdb.connect(str(db), read_only=True)
    try:
        for t, path in files.items():
            done = out_dir / f"{t}.done"
            if not done.exists():
                t0 = time.perf_counter()
                con.execute(f"COPY {t} TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)")
                done.touch()
                log(f"  wrote {path} in {time.perf_counter() - t0:.1f}s")
    finally:
        con.close()
    return files


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()                                        # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def spark_floor(sql: str) -> str | None:
    """A DuckDB floor variant as Spark SQL, or None when it does not transpile cleanly."""
    sql = sql.replace("arg_min(", "min_by(").replace("$salt", ":salt").replace("hash(", "xxhash64(")
    try:
        out = sqlglot.transpile(sql, read="duckdb", write="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)[0]
    except Exception:
        return None
    return None if "QUALIFY" in out.upper() else out


def policy(files: dict[str, str] | None) -> dict[str, Any]:
    """bench_core's policy with the answer cache off (every run really runs), on Parquet sources if given."""
    pol = core.bench_policy(core._fresh_ledger(core.DATA_DIR))
    pol["reconstruction"] = {"cache_lifetime": 0}
    if files:
        pol["tables"].pop("people_pk")
        from dpsql.engines.duckdb import file_columns      # the owner's reading, as `dpsql init` writes it
        for t in ("people", "visits"):
            pol["tables"][t] = dict(pol["tables"][t], source=files[t], types=dict(file_columns(files[t])))
    return pol


def bench_size(people: int, repeat: int, spark, duck_threads: int) -> list[dict[str, Any]]:
    files = ensure_parquet(people)
    db = core.data_path(people)
    ledger = core._fresh_ledger(core.DATA_DIR)   # bench_core's connections: only for its raw one
    rows: list[dict[str, Any]] = []
    # DuckDB
    conn, raw = core.open_connections(db, duck_threads, ledger)
    conn.close()
    conn = dpsql.connect(str(db), policy=policy(None), analyst="bench", threads=duck_threads)
    cur = conn.cursor()
    for q in core.QUERIES:
        r = {"size": people, "query": f"{q.key} {q.title}"}
        r["duck_dpsql"] = timed(lambda: (cur.execute(q.sql), cur.fetchall()), repeat)
        r["duck_raw"] = timed(lambda: core._run_raw(raw, q.sql), repeat)
        floors = [timed(lambda f=f: core._run_raw(raw, f.sql, {"salt": core._salt()}), repeat) for f in q.floors]
        r["duck_floor"] = min(floors) if floors else None
        log(f"  duckdb {q.key}: dpsql {r['duck_dpsql']:.0f} ms, raw {r['duck_raw']:.0f} ms, "
            f"floor {r['duck_floor'] or 0:.0f} ms")
        rows.append(r)
    conn.close()
    raw.close()
    # Spark
    t0 = time.perf_counter()
    sconn = dpsql.connect(spark, policy=policy(files), analyst="bench")
    log(f"  spark: session open (sources registered) in {time.perf_counter() - t0:.1f}s")
    scur = sconn.cursor()
    rawspark = spark.newSession()
    for t in ("people", "visits"):
        rawspark.read.parquet(files[t]).createOrReplaceTempView(t)
    for r, q in zip(rows, core.QUERIES):
        r["spark_dpsql"] = timed(lambda: (scur.execute(q.sql), scur.fetchall()), repeat)
        r["spark_raw"] = timed(lambda: rawspark.sql(q.sql).collect(), repeat)
        best = None
        for f in q.floors:
            sql = spark_floor(f.sql)
            if sql is None:
                continue
            try:
                ms = timed(lambda s=sql: rawspark.sql(s, args={"salt": core._salt()} if ":salt" in s else None)
                           .collect(), repeat)
            except Exception as err:       # a variant Spark cannot run: skipped
                log(f"    floor {f.name} skipped on Spark: {type(err).__name__}")
                continue
            best = ms if best is None else min(best, ms)
        r["spark_floor"] = best
        log(f"  spark  {q.key}: dpsql {r['spark_dpsql']:.0f} ms, raw {r['spark_raw']:.0f} ms, "
            f"floor {best or 0:.0f} ms")
    sconn.close()
    return rows


def render(rows: list[dict[str, Any]], argv: list[str], master: str, repeat: int) -> str:
    def ms(v):
        return "-" if v is None else f"{v:,.0f}"

    def ratio(a, b):
        return "-" if a is None or not b else f"{a / b:.2f}x"

    out = ["# Spark benchmark", "",
           f"`python benchmarks/spark.py {' '.join(argv)}` on {_dt.date.today()}; machine: {core.machine()}.",
           f"Spark master `{master}`; DuckDB with all cores. Median wall-clock ms of {repeat} runs after one "
           "warm-up. dpsql = end to end (analysis, ledger charge, engine, noise); raw = the query without "
           "privacy; floor = fastest hand-written variant with dpsql's guarantee (Spark: bench_core's DuckDB "
           "variants transpiled where they transpile).", "",
           "| people | query | DuckDB dpsql | DuckDB raw | DuckDB floor | dpsql/raw | Spark dpsql | Spark raw "
           "| Spark floor | dpsql/raw | Spark/DuckDB (dpsql) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['size']:,} | {r['query']} | {ms(r['duck_dpsql'])} | {ms(r['duck_raw'])} | "
                   f"{ms(r['duck_floor'])} | {ratio(r['duck_dpsql'], r['duck_raw'])} | {ms(r.get('spark_dpsql'))} | "
                   f"{ms(r.get('spark_raw'))} | {ms(r.get('spark_floor'))} | "
                   f"{ratio(r.get('spark_dpsql'), r.get('spark_raw'))} | {ratio(r.get('spark_dpsql'), r['duck_dpsql'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000000,50000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="12g")
    ap.add_argument("--shuffle-partitions", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    from pyspark.sql import SparkSession
    t0 = time.perf_counter()
    spark = (SparkSession.builder.master(args.master).appName("dpsql-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    log(f"Spark {spark.version} on {args.master} started in {time.perf_counter() - t0:.1f}s")
    rows: list[dict[str, Any]] = []
    random.seed()
    for size in (int(s) for s in args.sizes.split(",")):
        log(f"size {size:,}")
        rows += bench_size(size, args.repeat, spark, args.threads)
        Path(args.out).write_text(render(rows, argv, args.master, args.repeat))   # partial results survive
        log(f"wrote {args.out}")
    print(render(rows, argv, args.master, args.repeat))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
