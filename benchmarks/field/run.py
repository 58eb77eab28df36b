"""dpsql against the field: speed and accuracy beside SmartNoise SQL and Qrlew, with plots.

    python benchmarks/field/run.py [--quick] [--sizes 100000,1000000] [--accuracy-size 100000]

One command: prepares each anchor in its own virtual environment (benchmarks/.field-venvs/<name>,
created with `python -m venv` and `pip install`; a failed install is reported and the anchor
skipped), generates the core benchmark's seeded workload (dpsql.datagen, seed 0) at each size into
DuckDB files (benchmarks/.data/field_<N>.duckdb) and PostgreSQL (database dpsql_field, schema n<N>),
then per size times Q1-Q6 on every system (median of --repeat runs after one warm-up) and, at
--accuracy-size, draws --releases releases per query and epsilon from every system and compares them
with the exact unclipped answer. Anchors run as subprocess workers in their venvs (JSON job on stdin,
JSON results on stdout); dpsql and the raw engines run here. Writes benchmarks/results/field.json,
field.md and field_*.png, and prints the tables.

Same engine, same query, same policy: dpsql vs SmartNoise SQL on PostgreSQL; dpsql vs Qrlew's emitted
SQL on DuckDB. Equal privacy: every system gets the same TOTAL (epsilon, delta) per query, split as it
must (see the report's settings section).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
sys.path.insert(0, str(HERE))

import duckdb      # noqa: E402
import psycopg     # noqa: E402

import dpsql       # noqa: E402
from dpsql import datagen  # noqa: E402

import data as fdata       # noqa: E402
import harness             # noqa: E402

VENVS = BENCH / ".field-venvs"
DATA_DIR = BENCH / ".data"
RESULTS = BENCH / "results"

QUERIES = {
    "Q1": ("COUNT", "SELECT COUNT(*) FROM people"),
    "Q2": ("GROUP BY COUNT", "SELECT state, COUNT(*) FROM people GROUP BY state"),
    "Q3": ("SUM", "SELECT SUM(income) FROM people"),
    "Q4": ("AVG", "SELECT AVG(income) FROM people"),
    "Q5": ("GROUP BY AVG + WHERE", "SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education"),
    "Q6": ("visits SUM GROUP BY state", "SELECT state, SUM(cost) FROM visits GROUP BY state"),
}
STRICT = ("Q2", "Q4", "Q5", "Q6")        # AVG and grouped: dpsql's error must be strictly lower
SPEED_AIM = 1.5                         # issue 17: faster than SmartNoise everywhere, aiming at 1.5x
EPSILON = 1.0                           # total per query, speed runs and the accuracy table
DELTA = 1e-6                            # total per query, every system
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)   # the error-vs-epsilon plot

ANCHORS = {
    "smartnoise": {"packages": ["smartnoise-sql", "psycopg2-binary"], "module": "snsql",
                   "dist": "smartnoise-sql", "worker": HERE / "worker_smartnoise.py"},
    "qrlew": {"packages": ["pyqrlew", "duckdb", "psycopg2-binary"], "module": "pyqrlew",
              "dist": "pyqrlew", "worker": HERE / "worker_qrlew.py"},
}

# The policy every system gets: dpsql's (datagen.demo_policy), written out for the anchors.
POL = datagen.demo_policy()
PEOPLE = POL["tables"]["people"]
VISITS = POL["tables"]["visits"]
VISITS_ROWS = VISITS["max_rows_per_unit"] * VISITS["max_groups_per_unit"]   # the most rows one person adds


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- anchors' environments ---------------------------------------------------------------------------

def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def prepare_anchor(name: str) -> dict:
    """Create the venv and install the anchor unless it already imports. -> {"status", "version"|"reason"}."""
    spec = ANCHORS[name]
    py = venv_python(name)
    check = [str(py), "-c", f"import {spec['module']}; from importlib.metadata import version; "
                            f"print(version({spec['dist']!r}))"]
    if py.exists():
        r = subprocess.run(check, capture_output=True, text=True)
        if r.returncode == 0:
            return {"status": "ok", "version": r.stdout.strip()}
    log(f"  installing {name} into {VENVS / name} ...")
    try:
        VENVS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / name)], check=True, capture_output=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", *spec["packages"]],
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            return {"status": "missing", "reason": f"pip install failed: {r.stderr.strip()[-400:]}"}
        r = subprocess.run(check, capture_output=True, text=True)
        if r.returncode != 0:
            return {"status": "missing", "reason": f"import failed: {r.stderr.strip()[-400:]}"}
        return {"status": "ok", "version": r.stdout.strip()}
    except (OSError, subprocess.SubprocessError) as err:
        return {"status": "missing", "reason": f"{type(err).__name__}: {err}"}


def run_worker(name: str, job: dict, timeout: float = 7200) -> dict:
    """Run an anchor's worker on one job; its stderr (progress) passes through."""
    spec = ANCHORS[name]
    r = subprocess.run([str(venv_python(name)), str(spec["worker"])], input=json.dumps(job),
                       stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout)
    if r.returncode != 0:
        raise harness.WorkerError(f"{name}: worker exited with {r.returncode}")
    return harness.parse_worker_output(r.stdout, name)


# --- settings handed to each system --------------------------------------------------------------------

def _numeric(v: dict) -> bool:
    """Numeric bounds (the demo policy also bounds visit_date with dates, which no field query reads
    and which JSON cannot carry to the anchors' workers)."""
    return "lower" in v and isinstance(v["lower"], (int, float)) and not isinstance(v["lower"], bool)


def _bounds(table: dict) -> dict:
    return {c: v for c, v in table["columns"].items() if _numeric(v)}


def _values(table: dict) -> dict:
    return {c: v["values"] for c, v in table["columns"].items() if "values" in v}


def smartnoise_tables() -> dict:
    def cols(table: dict, types: dict) -> dict:
        out = {}
        for c, t in types.items():
            d = {"type": t}
            b = table["columns"].get(c, {})
            if _numeric(b):
                d.update(lower=b["lower"], upper=b["upper"])
            out[c] = d
        return out
    return {
        "people": {"max_ids": PEOPLE["max_rows_per_unit"] * PEOPLE["max_groups_per_unit"], "censor_dims": False,
                   "columns": cols(PEOPLE, {"age": "int", "income": "float", "state": "string", "sex": "string",
                                            "education": "string"})},
        "visits": {"max_ids": VISITS_ROWS, "censor_dims": False,
                   "columns": cols(VISITS, {"visit_id": "int", "visit_date": "datetime", "state": "string",
                                            "cost": "float", "kind": "string"})},
    }


def qrlew_job_base(schema: str, duck_path: Path) -> dict:
    ranges = {t: {c: [b["lower"], b["upper"]] for c, b in _bounds(POL["tables"][t]).items()} for t in ("people", "visits")}
    values = {t: _values(POL["tables"][t]) for t in ("people", "visits")}
    queries = []
    for k, (_, sql) in QUERIES.items():
        t = VISITS if "visits" in sql else PEOPLE
        queries.append({"key": k, "sql": sql,
                        "max_multiplicity": t["max_rows_per_unit"] * t["max_groups_per_unit"],
                        "max_groups": t["max_groups_per_unit"]})
    return {"sqlalchemy_url": fdata.pg_url().replace("postgresql://", "postgresql+psycopg2://"),
            "pg_dsn": fdata.pg_url(), "schema": schema, "duckdb_path": str(duck_path),
            "privacy_unit": "person_id", "tables": ["people", "visits"], "ranges": ranges, "values": values,
            "delta": DELTA, "queries": queries}


def dpsql_policy(ledger: Path) -> dict:
    pol = datagen.demo_policy(ledger=str(ledger), epsilon=1e12, delta=0.5, query_epsilon=EPSILON)
    pol["defaults"]["delta"] = DELTA
    pol["reconstruction"] = {"cache_lifetime": 0}    # every release is a fresh draw (and charged)
    # No release-timing floor or quantum (a policy's choice of latency, not work: as in bench_core);
    # with the defaults every dpsql time here would be rounded up to a multiple of the quantum.
    pol["timing"] = {"quantum": 0, "floor": 0}
    return pol


def fresh_ledger() -> Path:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    ledger = DATA_DIR / "field_ledger.sqlite"
    for suffix in ("", "-wal", "-shm", "-journal", ".audit.jsonl"):
        Path(str(ledger) + suffix).unlink(missing_ok=True)
    return ledger


# --- timing here (dpsql and the raw engines) ------------------------------------------------------------

def time_pair(tasks: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """ms of each task after one warm-up; runs interleaved in rotating order."""
    names = list(tasks)
    for n in names:
        tasks[n]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        for i in range(len(names)):
            n = names[(i + r) % len(names)]
            t0 = time.perf_counter()
            tasks[n]()
            out[n].append((time.perf_counter() - t0) * 1000)
    return out


def _raw_duckdb(conn, path: Path):
    """A plain connection to the DuckDB instance dpsql opened (same file, same configuration)."""
    from dpsql.engines import duckdb as dpsql_duckdb
    locked = getattr(dpsql_duckdb, "LOCKED_CONFIG", None) or getattr(dpsql_duckdb, "_LOCKED_CONFIG", {})
    try:
        return duckdb.connect(str(path), read_only=True, config=dict(locked))
    except duckdb.Error:
        return conn.session.engine._con.cursor()


def time_local(size: int, duck_path: Path, pg: str, schema: str, repeat: int) -> dict[str, dict[str, list[float]]]:
    ledger = fresh_ledger()
    pol = dpsql_policy(ledger)
    d_pg = dpsql.connect(pg, policy=pol, analyst="field", schema=schema)
    d_duck = dpsql.connect(str(duck_path), policy=pol, analyst="field")
    raw_pg = psycopg.connect(pg, autocommit=True)
    raw_pg.execute(f"SET search_path = {schema}")
    raw_duck = _raw_duckdb(d_duck, duck_path)
    out: dict[str, dict[str, list[float]]] = {}
    try:
        cp, cd = d_pg.cursor(), d_duck.cursor()
        for k, (_, sql) in QUERIES.items():
            def dp_pg(sql=sql):
                cp.execute(sql)
                return cp.fetchall()

            def dp_duck(sql=sql):
                cd.execute(sql)
                return cd.fetchall()

            t = time_pair({"raw_pg": lambda sql=sql: raw_pg.execute(sql).fetchall(), "dpsql_pg": dp_pg}, repeat)
            t.update(time_pair({"raw_duckdb": lambda sql=sql: raw_duck.execute(sql).fetchall(),
                                "dpsql_duckdb": dp_duck}, repeat))
            out[k] = t
            log(f"    [dpsql] {k}: PG {harness.median(t['dpsql_pg']):.1f} ms (raw {harness.median(t['raw_pg']):.1f}), "
                f"DuckDB {harness.median(t['dpsql_duckdb']):.1f} ms (raw {harness.median(t['raw_duckdb']):.1f})")
    finally:
        d_pg.close()
        d_duck.close()
        raw_pg.close()
        raw_duck.close()
    return out


def dpsql_releases(duck_path: Path, epsilons, releases: int) -> dict[str, dict[str, list]]:
    """out[query][epsilon] = releases, each a list of rows [keys..., value] (dpsql on DuckDB)."""
    pol = dpsql_policy(fresh_ledger())
    out: dict[str, dict[str, list]] = {}
    with dpsql.connect(str(duck_path), policy=pol, analyst="field") as conn:
        cur = conn.cursor()
        for k, (_, sql) in QUERIES.items():
            for eps in epsilons:
                cur.execute(f"SET dpsql.epsilon = {eps}")
                rel = []
                for _ in range(releases):
                    cur.execute(sql)
                    rows = cur.fetchall()
                    assert not getattr(cur, "cached", False), "dpsql repeated a cached answer"
                    rel.append([[v if isinstance(v, str) else (None if v is None else float(v)) for v in r]
                                for r in rows])
                out.setdefault(k, {})[repr(float(eps))] = rel
            log(f"    [dpsql] {k}: {releases} releases at {len(epsilons)} epsilons")
    return out


def exact_answers(duck_path: Path) -> dict[str, list]:
    con = duckdb.connect(str(duck_path), read_only=True)
    try:
        return {k: [[v if isinstance(v, str) else float(v) for v in r] for r in con.execute(sql).fetchall()]
                for k, (_, sql) in QUERIES.items()}
    finally:
        con.close()


# --- plots ---------------------------------------------------------------------------------------------

COLORS = {"dpsql": "tab:blue", "smartnoise": "tab:orange", "qrlew": "tab:green",
          "raw_pg": "tab:gray", "raw_duckdb": "black"}


def plot_errors(curves: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharex=True)
    for ax, q in zip(axes.flat, QUERIES):
        for system, pts in curves.get(q, {}).items():
            xs, ys = zip(*pts)
            ax.plot(xs, [max(y, 1e-9) for y in ys], "o-", color=COLORS[system], label=system)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{q}: {QUERIES[q][0]}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("total epsilon per query")
    for ax in axes[:, 0]:
        ax.set_ylabel("median relative error")
    axes.flat[0].legend()
    fig.suptitle(f"Error against epsilon (delta {DELTA:g} per query), 100k people-scale data", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_times(rows: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    series = {"dpsql_pg": ("dpsql (PG)", "tab:blue", "-"), "smartnoise_pg": ("SmartNoise (PG)", "tab:orange", "-"),
              "raw_pg": ("raw PG", "tab:gray", "-"), "dpsql_duckdb": ("dpsql (DuckDB)", "tab:blue", "--"),
              "qrlew_duckdb": ("Qrlew SQL (DuckDB)", "tab:green", "--"), "raw_duckdb": ("raw DuckDB", "black", "--")}
    for ax, q in zip(axes.flat, QUERIES):
        qrows = sorted((r for r in rows if r.query == q), key=lambda r: r.size)
        for col, (label, color, style) in series.items():
            pts = [(r.size, r.ms[col]) for r in qrows if r.ms.get(col)]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, "o" + style, color=color, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{q}: {QUERIES[q][0]}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("people")
    for ax in axes[:, 0]:
        ax.set_ylabel("median ms")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Time against data size", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- report --------------------------------------------------------------------------------------------

def settings_text(anchors: dict, results: dict) -> str:
    sn = anchors.get("smartnoise", {})
    qr = anchors.get("qrlew", {})
    lines = [
        "## Settings (same policy, equal privacy)",
        "",
        f"Every system gets the same total **epsilon {EPSILON:g} and delta {DELTA:g} per query** (the accuracy plot "
        f"varies epsilon over {', '.join(f'{e:g}' for e in EPSILONS)}). Bounds: income [0, 500000], age [0, 120], "
        "cost [0, 2000]; keys state, education from public domains (no partition selection anywhere).",
        "",
        "| system | engine | contribution bound | epsilon split | delta | mechanism |",
        "|---|---|---|---|---|---|",
        f"| dpsql {dpsql_version()} | PostgreSQL 15 (vs SmartNoise), DuckDB (vs Qrlew) | people: 1 row, 1 group per person; "
        f"visits: {VISITS['max_rows_per_unit']} rows per group, {VISITS['max_groups_per_unit']} groups per person "
        "(salted-hash group choice); per-unit clamps | evenly over its noisy parts (AVG: centred SUM + COUNT, "
        "epsilon/2 each) | 0 (Laplace) | discrete Laplace, exact sampler, OS CSPRNG |",
        f"| SmartNoise SQL {sn.get('version', '(missing)')} | PostgreSQL 15 | `max_ids` = 1 (people), "
        f"{VISITS_ROWS} (visits: the most rows dpsql lets one person add, so the same sensitivity 20000 for Q6); "
        "reservoir sample of max_ids rows per person (`ORDER BY random()`); `censor_dims: False` (public keys) | "
        "`Privacy(epsilon)` is charged per released statistic: per-statistic epsilon = total / "
        "`get_privacy_cost(query)` at epsilon 1 (AVG = SUM + COUNT: total/2) | `Privacy(delta=1e-6)`; its odometer "
        "reports ~5e-7 spent | its defaults: count discrete Laplace, float sum Laplace (OpenDP) |",
        f"| Qrlew {qr.get('version', '(missing)')} | its PostgreSQL-dialect SQL run on DuckDB | `max_multiplicity` 1, "
        f"`max_privacy_unit_groups` 1 (people); {VISITS_ROWS} and {VISITS['max_groups_per_unit']} (visits); "
        "ranges and possible values declared (`with_range`, `with_possible_values`; schema read with `ranges=False`) | "
        "its dp_event gives each of a query's k aggregates the whole (epsilon, delta): rewritten with epsilon/sqrt(k) "
        "(k Gaussians of multiplier z = one of z/sqrt(k)) | 1e-6, spent | Gaussian, classic calibration, noise drawn in "
        "SQL by the engine's `random()` (floating point) |",
        "",
        "dpsql's accuracy releases come from DuckDB (the noise does not depend on the engine; the exact "
        "answers are the same data).",
    ]
    for name, a in anchors.items():
        if a.get("status") != "ok":
            lines.append(f"\n**{name} missing**: {a.get('reason')}")
    return "\n".join(lines)


def dpsql_version() -> str:
    return getattr(dpsql, "__version__", "0.1.0")


def _load_text(res: dict) -> str:
    """The machine's load average (1/5/15 min) at the start and end of the run, when recorded."""
    if not (res.get("load_start") and res.get("load_end")):
        return ""
    fmt = "/".join
    return (f" Load average (1/5/15 min) {fmt(f'{x:.1f}' for x in res['load_start'])} at the start, "
            f"{fmt(f'{x:.1f}' for x in res['load_end'])} at the end.")


def render_report(res: dict) -> str:
    rows = harness.speed_rows(res["speed"])
    parts = [f"# dpsql against the field\n\nGenerated by `python benchmarks/field/run.py {' '.join(res['argv'])}` "
             f"on {res['when']} ({res['machine']}). Raw data: `benchmarks/results/field.json`."
             + _load_text(res) + "\n",
             settings_text(res["anchors"], res)]
    parts.append("## Speed\n\nMedian ms of " + str(res["repeat"]) + " timed runs after one warm-up, end to end "
                 "(dpsql: `execute` + `fetchall`, ledger charge included; SmartNoise: `reader.execute`; Qrlew: "
                 "rewrite + `to_query` + running its SQL). Ratios below 1 mean dpsql is faster.\n\n"
                 + harness.render_speed(rows))
    refused = res.get("refused", {})
    if any(refused.values()):
        parts.append("### Refused\n\n" + "\n".join(f"- {s} {q}: {e}" for s, by in refused.items() for q, e in by.items()))
    if res.get("accuracy"):
        size = res["accuracy_size"]
        acc, exact = res["accuracy"], res["exact"]
        table = harness.accuracy_table(acc, exact, repr(EPSILON))
        parts.append(f"## Accuracy\n\n{size:,} people, epsilon {EPSILON:g} total per query, {res['releases']} "
                     "releases per system; errors against the exact unclipped answer, over all releases and groups "
                     "(suppressed: share of exact groups a release left out).\n\n"
                     + harness.render_accuracy(table, [s for s in harness.SYSTEMS if any(s in acc[q] for q in acc)],
                                               refused))
        parts.append("![error against epsilon](field_error.png)\n\n![time against size](field_time.png)")
        tgt_a = harness.accuracy_target(table, STRICT)
    else:
        tgt_a = []
    big = max(r.size for r in rows) if rows else 0
    tgt_s = harness.speed_target(rows, big, factor=1.0)
    lines = ["## Targets", "", f"dpsql faster than SmartNoise SQL on PostgreSQL on every query at {big:,} people "
             f"(speed-up above 1; aim: {SPEED_AIM:g}x):", ""]
    for q, s, ok in tgt_s:
        aim = " (aim met)" if s is not None and s >= SPEED_AIM else ""
        lines.append(f"- {q}: {'—' if s is None else f'{s:.2f}x'} — {'met' if ok else '**missed**'}{aim}")
    if tgt_a:
        lines += ["", f"Median relative error at most SmartNoise's (and strictly lower on {', '.join(STRICT)}):", ""]
        for q, d, s, ok in tgt_a:
            lines.append(f"- {q}: dpsql {harness.fmt_err(d)} vs SmartNoise {harness.fmt_err(s)} — "
                         f"{'met' if ok else '**missed**'}")
    parts.append("\n".join(lines))
    if res.get("notes"):
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in res["notes"]))
    return "\n\n".join(parts) + "\n"


# --- main ----------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--accuracy-size", type=int, default=100000, help="size of the accuracy runs (0: none)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--releases", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="20k people, 2 runs, 3 releases, epsilon 1 only")
    ap.add_argument("--anchors", default="smartnoise,qrlew")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--render", action="store_true",
                    help="only rewrite field.md from the field.json in --out (after a change to the report)")
    args = ap.parse_args(argv)
    if args.render:
        res = json.loads((args.out / "field.json").read_text(encoding="utf-8"))
        report = render_report(res)
        (args.out / "field.md").write_text(report, encoding="utf-8")
        print(report)
        return 0
    epsilons = EPSILONS
    if args.quick:
        args.sizes, args.accuracy_size, args.repeat, args.releases = "20000", 20000, 2, 3
        epsilons = (EPSILON,)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    log("anchors:")
    anchors = {}
    for name in [a for a in args.anchors.split(",") if a]:
        anchors[name] = prepare_anchor(name)
        a = anchors[name]
        log(f"  {name}: {a['status']} {a.get('version') or a.get('reason')}")
    res: dict[str, Any] = {"argv": argv, "when": _dt.datetime.now().isoformat(timespec="seconds"),
                           "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                                      f"DuckDB {duckdb.__version__}",
                           "repeat": args.repeat, "releases": args.releases, "epsilon": EPSILON, "delta": DELTA,
                           "epsilons": list(epsilons), "anchors": anchors, "speed": {}, "refused": {},
                           "accuracy_size": args.accuracy_size, "accuracy": {}, "exact": {}, "anchor_settings": {},
                           "notes": [], "load_start": list(os.getloadavg())}
    for n in sizes:
        log(f"size {n:,}: data")
        duck_path = fdata.ensure_duckdb(n, DATA_DIR, log)
        pg, schema = fdata.ensure_postgres(n, DATA_DIR, log=log)
        with_acc = n == args.accuracy_size
        speed = {k: {} for k in QUERIES}
        log(f"size {n:,}: dpsql and raw engines")
        for k, t in time_local(n, duck_path, pg, schema, args.repeat).items():
            speed[k].update(t)
        timing = {"epsilon": EPSILON, "warmup": 1, "repeat": args.repeat}
        accuracy = {"epsilons": list(epsilons), "releases": args.releases} if with_acc else None
        jobs = {
            "smartnoise": dict(dsn=pg, database=fdata.PG_DB, schema=schema, tables=smartnoise_tables(),
                               privacy_unit="person_id", delta=DELTA,
                               queries=[{"key": k, "sql": s} for k, (_, s) in QUERIES.items()]),
            "qrlew": qrlew_job_base(schema, duck_path),
        }
        col = {"smartnoise": "smartnoise_pg", "qrlew": "qrlew_duckdb"}
        for name, a in anchors.items():
            if a["status"] != "ok":
                for k in QUERIES:
                    speed[k][col[name]] = {"skipped": a.get("reason")}
                continue
            log(f"size {n:,}: {name} worker")
            try:
                out = run_worker(name, dict(jobs[name], timing=timing, accuracy=accuracy))
            except (harness.WorkerError, subprocess.SubprocessError, OSError) as err:
                res["notes"].append(f"{name} at {n:,}: worker failed: {err}")
                log(f"  {name} failed: {err}")
                for k in QUERIES:
                    speed[k][col[name]] = {"skipped": str(err)}
                continue
            res["anchor_settings"][name] = out.get("settings")
            for k in QUERIES:
                r = out["by_key"].get(k)
                if r is None:
                    speed[k][col[name]] = {"skipped": "no result"}
                elif r["status"] == "refused":
                    speed[k][col[name]] = {"refused": r["error"]}
                    res["refused"].setdefault(name, {})[k] = r["error"]
                else:
                    speed[k][col[name]] = r.get("times_ms") or []
                    extra = {x: r[x] for x in ("engine", "rewrite_ms", "cost", "per_column_epsilon", "epsilon_passed",
                                               "k", "costs", "duckdb_error") if x in r}
                    if extra:
                        speed[k][f"{name}_detail"] = extra
                    if with_acc and r.get("releases"):
                        res["accuracy"].setdefault(k, {})[name] = r["releases"]
        res["speed"][str(n)] = speed
        if with_acc:
            log(f"size {n:,}: dpsql releases")
            res["exact"] = exact_answers(duck_path)
            for k, by_eps in dpsql_releases(duck_path, epsilons, args.releases).items():
                res["accuracy"].setdefault(k, {})["dpsql"] = by_eps
    if args.accuracy_size and args.accuracy_size not in sizes:
        res["notes"].append(f"accuracy size {args.accuracy_size:,} is not among --sizes: no accuracy runs")
    res["load_end"] = list(os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "field.json").write_text(json.dumps(res, indent=None, separators=(",", ":")), encoding="utf-8")
    rows = harness.speed_rows(res["speed"])
    try:
        plot_times(rows, args.out / "field_time.png")
        if res["accuracy"]:
            plot_errors(harness.error_curves(res["accuracy"], res["exact"]), args.out / "field_error.png")
    except ImportError as err:
        res["notes"].append(f"no plots: {err} (install the bench extra)")
    report = render_report(res)
    (args.out / "field.md").write_text(report, encoding="utf-8")
    print(report)
    log(f"wrote {args.out / 'field.json'}, field.md, field_*.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
