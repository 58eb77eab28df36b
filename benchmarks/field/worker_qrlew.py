"""Qrlew worker: runs in its own virtual environment (benchmarks/.field-venvs/qrlew).

Qrlew (pyqrlew) rewrites a query into differentially private SQL that the caller runs on an engine.
It has no DuckDB dialect; its PostgreSQL dialect's SQL is run on DuckDB (the benchmark's DuckDB file
ATTACHed read-only under the schema's name, so "n100000"."people" resolves), and if DuckDB cannot run
it, on PostgreSQL; the engine used is reported per query.

Job (JSON on stdin):
    {"sqlalchemy_url": "postgresql+psycopg2://...", "pg_dsn": "postgresql://...", "schema": "n100000",
     "duckdb_path": ".../field_100000.duckdb", "privacy_unit": "person_id",
     "ranges": {"people": {"income": [0, 500000]}}, "values": {"people": {"state": [...]}},
     "delta": 1e-6,
     "queries": [{"key": "Q1", "sql": "...", "max_multiplicity": 1, "max_groups": 1}],
     "timing": {"epsilon": 1.0, "warmup": 1, "repeat": 5} | null,
     "accuracy": {"epsilons": [...], "releases": 20} | null}

The schema comes from PostgreSQL's catalog with ranges=False (no bounds read from the data); bounds
and key domains are declared with with_range / with_possible_values, as the policy does for dpsql.

Epsilon: the job's epsilon is the TOTAL per query. Qrlew spends its (epsilon, delta) on each of a
query's k Gaussian aggregates (its dp_event lists k Gaussian events, each with the noise multiplier
of the whole budget), so a query with k aggregates (AVG: SUM and COUNT) is rewritten with epsilon / sqrt(k):
k Gaussians of multiplier z compose into one of multiplier z / sqrt(k), which under the classic
calibration Qrlew uses is (epsilon, delta)-DP for the total.

Output: {"system": "qrlew", "version", "settings", "results": [{"key", "status", "error", "engine",
"events", "epsilon_passed", "rewrite_ms", "times_ms", "releases": {"<eps>": [[[key..., value], ...], ...]}}]}
"""
from __future__ import annotations

import json
import math
import re
import sys
import time
import traceback


def log(msg: str) -> None:
    print(f"    [qrlew] {msg}", file=sys.stderr, flush=True)


def qualify(sql: str, schema: str, tables) -> str:
    for t in tables:
        sql = re.sub(rf"\bFROM\s+{t}\b", f"FROM {schema}.{t}", sql, flags=re.I)
    return sql


def gaussian_events(event: dict) -> list[float]:
    if event.get("class_name") == "GaussianDpEvent":
        return [float(event["noise_multiplier"])]
    out = []
    for e in event.get("events", []) or []:
        out += gaussian_events(e)
    return out


def plain(v):
    if v is None or isinstance(v, str):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def main() -> int:
    job = json.load(sys.stdin)
    import duckdb
    import psycopg2
    import pyqrlew as qrl
    import sqlalchemy as sa
    from importlib.metadata import version

    schema = job["schema"]
    engine = sa.create_engine(job["sqlalchemy_url"])
    ds = qrl.Dataset.from_database("dpsql_field", engine, schema, ranges=False)
    for table, cols in job["ranges"].items():
        for col, (lo, hi) in cols.items():
            ds = ds.with_range(schema, table, col, lo, hi)
    for table, cols in job["values"].items():
        for col, values in cols.items():
            ds = ds.with_possible_values(schema, table, col, values)
    pu = [(t, [], job["privacy_unit"]) for t in job["tables"]]
    duck = duckdb.connect()
    duck.execute(f"ATTACH '{job['duckdb_path']}' AS {schema} (READ_ONLY)")
    pg = psycopg2.connect(job["pg_dsn"])
    pg.autocommit = True
    delta = job["delta"]
    out = {"system": "qrlew", "version": version("pyqrlew"),
           "settings": {"delta": delta, "ranges": job["ranges"], "values": job["values"],
                        "privacy_unit": pu, "mechanism": "Gaussian (classic calibration), noise drawn in SQL "
                                                          "with the engine's RANDOM()"},
           "results": []}

    for q in job["queries"]:
        sql = qualify(q["sql"], schema, job["tables"])
        res = {"key": q["key"], "sql": sql, "status": "ok", "error": None, "releases": {},
               "max_multiplicity": q["max_multiplicity"], "max_groups": q["max_groups"]}
        out["results"].append(res)
        try:
            def rewrite(eps: float) -> str:
                rel = ds.relation(sql)
                dp = rel.rewrite_with_differential_privacy(ds, pu, {"epsilon": eps, "delta": delta},
                                                           q["max_multiplicity"], None, q["max_groups"])
                return dp.relation().to_query(), dp.dp_event().to_dict()

            _, event = rewrite(1.0)
            k = max(1, len(gaussian_events(event)))
            res["events"] = event
            res["k"] = k
            dp_sql, _ = rewrite(1.0 / math.sqrt(k))
            try:
                duck.execute(dp_sql).fetchall()
                res["engine"] = "duckdb"

                def run(text):
                    return duck.execute(text).fetchall()
            except Exception as err:
                log(f"{q['key']}: DuckDB cannot run Qrlew's SQL ({type(err).__name__}); using PostgreSQL")
                res["duckdb_error"] = f"{type(err).__name__}: {err}"[:300]
                res["engine"] = "postgres"

                def run(text):
                    with pg.cursor() as cur:
                        cur.execute(text)
                        return cur.fetchall()

            if job.get("timing"):
                tm = job["timing"]
                eps_in = tm["epsilon"] / math.sqrt(k)
                res["epsilon_passed"] = eps_in
                for _ in range(tm.get("warmup", 1)):
                    run(rewrite(eps_in)[0])
                times, rewrites = [], []
                for _ in range(tm["repeat"]):
                    t0 = time.perf_counter()
                    text, _ = rewrite(eps_in)
                    t1 = time.perf_counter()
                    run(text)
                    t2 = time.perf_counter()
                    times.append((t2 - t0) * 1000)
                    rewrites.append((t1 - t0) * 1000)
                res["times_ms"], res["rewrite_ms"] = times, rewrites
                log(f"{q['key']}: median {sorted(times)[len(times) // 2]:.1f} ms on {res['engine']}")
            if job.get("accuracy"):
                acc = job["accuracy"]
                for eps in acc["epsilons"]:
                    text, _ = rewrite(eps / math.sqrt(k))
                    res["releases"][repr(float(eps))] = [[[plain(v) for v in r] for r in run(text)]
                                                         for _ in range(acc["releases"])]
                log(f"{q['key']}: {acc['releases']} releases at {len(acc['epsilons'])} epsilons")
        except Exception as err:  # Qrlew refuses what it cannot rewrite: record its error
            res["status"] = "refused"
            res["error"] = f"{type(err).__name__}: {err}"[:500]
            log(f"{q['key']}: refused: {res['error']}")
            traceback.print_exc(file=sys.stderr)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
