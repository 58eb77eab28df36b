"""Field worker for benchmarks/aggregates.py: one anchor system answers the aggregate queries.

Runs in the anchor's own virtual environment (benchmarks/.field-venvs/<name>): SmartNoise SQL and
Qrlew reuse the field benchmark's venvs; OpenDP and Tumult Analytics have their own. Reads one JSON
job on stdin, writes one JSON object on stdout (progress on stderr):

    {"system": "smartnoise" | "qrlew" | "opendp" | "tumult",
     "csv": ".../people.csv",            # person_id, age, income: the synthetic demo rows, unclipped
     "delta": 1e-6, "epsilons": [0.1, 1.0, 10.0], "runs": 15,
     "queries": [{"key": "MEDIAN(income)", "sql": "...",        # the system's spelling, or
                  "column": "income", "alpha": 0.5,             # (OpenDP, Tumult) a quantile
                  "bounds": {"age": [0, 120], "income": [0, 500000]}}]}

Output: {"system", "version", "settings", "results": [{"key", "status": "ok" | "refused", "error",
"note", "releases": {"<eps>": [value, ...]}}]}. Epsilon in the job is the TOTAL per query; each
system's own accounting is converted as the field workers do (see their docstrings):

* smartnoise: Privacy(epsilon) is charged per released statistic, so the per-statistic epsilon is
  the total / get_privacy_cost(query) at epsilon 1 (STDDEV = SUM(x*x), SUM(x), COUNT: total/3).
  Engine pandas (snsql.from_df) on the CSV; metadata: one row per person (max_ids 1), bounds
  declared, clamp_columns on.
* qrlew: the schema is read from a SQLite copy of the CSV (ranges=False) and the bounds declared
  with with_range; the rewritten SQL runs on DuckDB. A query with k Gaussian aggregates is
  rewritten with epsilon / sqrt(k) (k Gaussians of multiplier z compose into one of z / sqrt(k)).
* opendp: make_private_quantile (MaxDivergence, SymmetricDistance: an added or removed row moves
  the score by 1, as one person does here) over the candidate grid job["candidates"] on the
  data clipped to the bounds; its scale found with binary_search_param for exactly epsilon.
* tumult: a Session over a Spark DataFrame of the CSV, AddOneRow (one row per person),
  PureDPBudget; QueryBuilder.quantile(column, alpha, low, high), each release its own evaluate.
"""
from __future__ import annotations

import csv
import json
import math
import os
import sys
import tempfile
import time
import traceback


def log(msg: str) -> None:
    print(f"    [{SYSTEM}] {msg}", file=sys.stderr, flush=True)


SYSTEM = "?"


def version_of(dist: str) -> str:
    from importlib.metadata import version
    return version(dist)


def refused(res: dict, err: BaseException) -> None:
    res["status"] = "refused"
    res["error"] = f"{type(err).__name__}: {err}".split("\n")[0][:400]
    log(f"{res['key']}: refused: {res['error']}")


# --- SmartNoise SQL --------------------------------------------------------------------------------------

def run_smartnoise(job: dict) -> dict:
    import pandas as pd
    import snsql
    from snsql import Privacy

    df = pd.read_csv(job["csv"])
    out = {"version": version_of("smartnoise-sql"), "settings": {"engine": "pandas (snsql.from_df)",
           "delta": job["delta"], "mechanisms": "SmartNoise defaults (int: discrete Laplace; float: Laplace)"},
           "results": []}
    for q in job["queries"]:
        res = {"key": q["key"], "sql": q["sql"], "status": "ok", "error": None, "releases": {}}
        out["results"].append(res)
        cols = {"person_id": {"type": "int", "private_id": True}}
        for c, (lo, hi) in q["bounds"].items():
            cols[c] = {"type": "int" if c == "age" else "float", "lower": lo, "upper": hi}
        meta = {"db": {"public": {"people": dict(cols, max_ids=1, row_privacy=False, sample_max_ids=True,
                                                  censor_dims=False, clamp_counts=False, clamp_columns=True,
                                                  use_dpsu=False)}}}
        res["metadata"] = meta
        try:
            unit = snsql.from_df(df, privacy=Privacy(epsilon=1.0, delta=job["delta"]),
                                 metadata=meta).get_privacy_cost(q["sql"])[0]
            res["statistics"] = float(unit)
            for eps in job["epsilons"]:
                r = snsql.from_df(df, privacy=Privacy(epsilon=eps / unit, delta=job["delta"]), metadata=meta)
                res["releases"][repr(float(eps))] = [float(r.execute(q["sql"])[1][0]) for _ in range(job["runs"])]
            log(f"{q['key']}: ok ({unit:g} statistics)")
        except Exception as err:  # SmartNoise refuses what it cannot rewrite
            refused(res, err)
    return out


# --- Qrlew -------------------------------------------------------------------------------------------------

def gaussian_events(event: dict) -> list[float]:
    if event.get("class_name") == "GaussianDpEvent":
        return [float(event["noise_multiplier"])]
    out = []
    for e in event.get("events", []) or []:
        out += gaussian_events(e)
    return out


def run_qrlew(job: dict) -> dict:
    import sqlite3

    import duckdb
    import pyqrlew as qrl
    import sqlalchemy as sa

    tmp = tempfile.mkdtemp(prefix="qrlew-agg-")
    lite = os.path.join(tmp, "people.sqlite")
    con = sqlite3.connect(lite)
    con.execute("CREATE TABLE people (person_id INTEGER NOT NULL, age INTEGER NOT NULL, income REAL NOT NULL)")
    with open(job["csv"], newline="") as f:
        rd = csv.reader(f)
        next(rd)
        con.executemany("INSERT INTO people VALUES (?, ?, ?)", ((int(a), int(b), float(x)) for a, b, x in rd))
    con.commit()
    con.close()
    base = qrl.Dataset.from_database("agg", sa.create_engine(f"sqlite:///{lite}"), None, ranges=False)
    duck = duckdb.connect()
    duck.execute(f"CREATE TABLE people AS SELECT * FROM read_csv_auto('{job['csv']}')")
    pu = [("people", [], "person_id")]
    delta = job["delta"]
    out = {"version": version_of("pyqrlew"), "settings": {"delta": delta, "privacy_unit": pu,
           "max_multiplicity": 1, "max_privacy_unit_groups": 1,
           "mechanism": "Gaussian (classic calibration), noise drawn in SQL by DuckDB's random()"},
           "results": []}
    for q in job["queries"]:
        res = {"key": q["key"], "sql": q["sql"], "status": "ok", "error": None, "releases": {}}
        out["results"].append(res)
        try:
            ds = base
            for c, (lo, hi) in q["bounds"].items():
                ds = ds.with_range(None, "people", c, lo, hi)

            def rewrite(eps: float):
                dp = ds.relation(q["sql"]).rewrite_with_differential_privacy(ds, pu, {"epsilon": eps, "delta": delta},
                                                                             1, None, 1)
                return dp.relation().to_query(), dp.dp_event().to_dict()

            _, event = rewrite(1.0)
            k = max(1, len(gaussian_events(event)))
            res["k"] = k
            for eps in job["epsilons"]:
                text, _ = rewrite(eps / math.sqrt(k))
                res["releases"][repr(float(eps))] = [float(duck.execute(text).fetchone()[0])
                                                     for _ in range(job["runs"])]
            log(f"{q['key']}: ok (k = {k})")
        except BaseException as err:  # Qrlew panics (PanicException is a BaseException) on what it lacks
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            refused(res, err)
    return out


# --- OpenDP --------------------------------------------------------------------------------------------

def read_column(path: str, column: str, lo: float, hi: float) -> list[float]:
    with open(path, newline="") as f:
        return [min(max(float(r[column]), lo), hi) for r in csv.DictReader(f)]


def run_opendp(job: dict) -> dict:
    import opendp.prelude as dp
    dp.enable_features("contrib")
    out = {"version": version_of("opendp"), "settings": {
        "mechanism": "opendp.measurements.make_private_quantile(VectorDomain(AtomDomain(f64)), "
                     "SymmetricDistance, MaxDivergence, candidates, alpha, scale); scale by "
                     "binary_search_param so that d_in 1 maps to exactly epsilon"}, "results": []}
    for q in job["queries"]:
        res = {"key": q["key"], "status": "ok", "error": None, "releases": {}}
        out["results"].append(res)
        try:
            lo, hi = q["bounds"][q["column"]]
            n = q.get("grid", 1024)
            cands = [lo + (hi - lo) * i / n for i in range(n + 1)]
            res["candidates"] = f"{n + 1} equally spaced in [{lo:g}, {hi:g}] (step {(hi - lo) / n:g})"
            data = read_column(job["csv"], q["column"], lo, hi)
            dom = dp.vector_domain(dp.atom_domain(T=float, nan=False))

            def make(scale, alpha=q["alpha"]):
                return dp.m.make_private_quantile(dom, dp.symmetric_distance(), dp.max_divergence(),
                                                  candidates=cands, alpha=alpha, scale=scale)
            for eps in job["epsilons"]:
                scale = dp.binary_search_param(make, d_in=1, d_out=eps)
                m = make(scale)
                res.setdefault("scales", {})[repr(float(eps))] = scale
                res["releases"][repr(float(eps))] = [float(m(data)) for _ in range(job["runs"])]
            log(f"{q['key']}: ok")
        except Exception as err:
            refused(res, err)
    return out


# --- Tumult Analytics ----------------------------------------------------------------------------------

def run_tumult(job: dict) -> dict:
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, PureDPBudget, QueryBuilder, Session

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sdf = spark.read.csv(job["csv"], header=True, inferSchema=True)
    sdf = sdf.selectExpr("CAST(person_id AS BIGINT) AS person_id", "CAST(age AS BIGINT) AS age",
                         "CAST(income AS DOUBLE) AS income").cache()
    sdf.count()
    out = {"version": version_of("tmlt.analytics"), "settings": {
        "mechanism": "QueryBuilder(...).quantile(column, alpha, low, high): Tumult's exponential mechanism "
                     "over the intervals between sorted clamped values (no grid), PureDPBudget, AddOneRow",
        "spark": "local[1]"}, "results": []}
    for q in job["queries"]:
        res = {"key": q["key"], "status": "ok", "error": None, "releases": {}}
        out["results"].append(res)
        try:
            lo, hi = q["bounds"][q["column"]]
            for eps in job["epsilons"]:
                sess = Session.from_dataframe(privacy_budget=PureDPBudget(eps * job["runs"]), source_id="people",
                                              dataframe=sdf, protected_change=AddOneRow())
                vals = []
                for _ in range(job["runs"]):
                    query = QueryBuilder("people").quantile(q["column"], q["alpha"], lo, hi, name="v")
                    vals.append(float(sess.evaluate(query, PureDPBudget(eps)).collect()[0]["v"]))
                res["releases"][repr(float(eps))] = vals
                log(f"{q['key']}: epsilon {eps:g} done")
            log(f"{q['key']}: ok")
        except Exception as err:
            refused(res, err)
    spark.stop()
    return out


RUNNERS = {"smartnoise": run_smartnoise, "qrlew": run_qrlew, "opendp": run_opendp, "tumult": run_tumult}


def main() -> int:
    global SYSTEM
    job = json.load(sys.stdin)
    SYSTEM = job["system"]
    t0 = time.perf_counter()
    out = RUNNERS[SYSTEM](job)
    out["system"] = SYSTEM
    out["seconds"] = time.perf_counter() - t0
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Exception:
        traceback.print_exc(file=sys.stderr)
        raise
