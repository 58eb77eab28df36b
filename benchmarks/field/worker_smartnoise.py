"""SmartNoise SQL worker: runs in its own virtual environment (benchmarks/.field-venvs/smartnoise).

Reads one JSON job on stdin, writes one JSON object on stdout (progress on stderr). Job:

    {"dsn": "postgresql://...", "database": "dpsql_field", "schema": "n100000",
     "tables": {"people": {"max_ids": 1, "columns": {"age": {"type": "int", "lower": 0, "upper": 120}, ...}}},
     "privacy_unit": "person_id", "delta": 1e-6,
     "queries": [{"key": "Q1", "sql": "SELECT COUNT(*) FROM people"}],
     "timing": {"epsilon": 1.0, "warmup": 1, "repeat": 5} | null,
     "accuracy": {"epsilons": [0.1, 1.0], "releases": 20} | null}

Each query's table names are qualified with the job's schema (SmartNoise names tables
schema.table in its metadata). Epsilon in the job is the TOTAL per query: SmartNoise's Privacy(epsilon)
is charged per released statistic (AVG = SUM + COUNT), so the per-statistic epsilon is the total
divided by get_privacy_cost's total at epsilon 1, and the resulting cost is reported.

Output: {"system": "smartnoise", "version": ..., "settings": {...}, "results": [
    {"key", "status": "ok" | "refused", "error", "per_column_epsilon", "cost": [eps, delta],
     "times_ms": [...], "releases": {"<eps>": [[[key..., value], ...], ...]}}]}
"""
from __future__ import annotations

import json
import re
import sys
import time
import traceback


def log(msg: str) -> None:
    print(f"    [smartnoise] {msg}", file=sys.stderr, flush=True)


def qualify(sql: str, schema: str, tables) -> str:
    for t in tables:
        sql = re.sub(rf"\bFROM\s+{t}\b", f"FROM {schema}.{t}", sql, flags=re.I)
    return sql


def metadata(job: dict) -> dict:
    tables = {}
    for name, t in job["tables"].items():
        cols = {job["privacy_unit"]: {"type": "int", "private_id": True}}
        cols.update(t["columns"])
        tables[name] = dict(cols, max_ids=t["max_ids"], row_privacy=False, sample_max_ids=True,
                            censor_dims=t.get("censor_dims", False), clamp_counts=False,
                            clamp_columns=True, use_dpsu=False)
    return {job["database"]: {job["schema"]: tables}}


def rows_of(result) -> list:
    """SmartNoise returns [header, row, ...]: keep the rows, values as floats, keys as strings."""
    out = []
    for r in list(result)[1:]:
        out.append([v if isinstance(v, str) else (None if v is None else float(v)) for v in r])
    return out


def main() -> int:
    job = json.load(sys.stdin)
    import psycopg2
    import snsql
    from snsql import Privacy
    from importlib.metadata import version

    conn = psycopg2.connect(job["dsn"])
    meta = metadata(job)
    delta = job["delta"]
    out = {"system": "smartnoise", "version": version("smartnoise-sql"), "engine": "postgres",
           "settings": {"metadata": meta, "delta": delta,
                        "mechanisms": "count: discrete Laplace; sum of float: Laplace (SmartNoise defaults)"},
           "results": []}

    def reader(eps_per_column: float):
        return snsql.from_connection(conn, privacy=Privacy(epsilon=eps_per_column, delta=delta),
                                     metadata=meta, engine="postgres")

    for q in job["queries"]:
        sql = qualify(q["sql"], job["schema"], job["tables"])
        res = {"key": q["key"], "sql": sql, "status": "ok", "error": None, "releases": {}}
        out["results"].append(res)
        try:
            unit_cost = reader(1.0).get_privacy_cost(sql)[0]

            def make(total: float):
                r = reader(total / unit_cost)
                return r, r.get_privacy_cost(sql)

            if job.get("timing"):
                tm = job["timing"]
                r, cost = make(tm["epsilon"])
                res["per_column_epsilon"] = tm["epsilon"] / unit_cost
                res["cost"] = list(cost)
                for _ in range(tm.get("warmup", 1)):
                    r.execute(sql)
                times = []
                for _ in range(tm["repeat"]):
                    t0 = time.perf_counter()
                    r.execute(sql)
                    times.append((time.perf_counter() - t0) * 1000)
                res["times_ms"] = times
                log(f"{q['key']}: median {sorted(times)[len(times) // 2]:.1f} ms")
            if job.get("accuracy"):
                acc = job["accuracy"]
                for eps in acc["epsilons"]:
                    r, cost = make(eps)
                    res.setdefault("costs", {})[repr(float(eps))] = list(cost)
                    res["releases"][repr(float(eps))] = [rows_of(r.execute(sql)) for _ in range(acc["releases"])]
                log(f"{q['key']}: {acc['releases']} releases at {len(acc['epsilons'])} epsilons")
        except Exception as err:  # SmartNoise refuses what it cannot express: record its error
            res["status"] = "refused"
            res["error"] = f"{type(err).__name__}: {err}"[:500]
            log(f"{q['key']}: refused: {res['error']}")
            traceback.print_exc(file=sys.stderr)
            try:
                conn.rollback()
            except Exception:
                pass
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
