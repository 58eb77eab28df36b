"""Core benchmark: dpsql end to end vs. the best hand-written SQL with the same guarantee vs. raw DuckDB.

    python benchmarks/bench_core.py [--sizes 1000000,10000000] [--repeat 5] [--out benchmarks/results/core.md]

For each size N the synthetic `people`/`visits` tables (dpsql.datagen, seed 0, with the `people_pk`
copy) live in benchmarks/.data/core_<N>.duckdb, generated once and reused. Every timing is the median
of --repeat wall-clock runs after one warm-up; the runs of one query are interleaved (dpsql, raw,
each floor variant, in a rotating order; then pk dpsql and pk raw likewise) so that load from other
processes on the machine hits them alike. All connections share one DuckDB instance (same file, same thread count).

  dpsql  cursor.execute(q); cursor.fetchall() through dpsql.connect(path, policy, analyst): parse,
         analysis, rewrite, ledger charge (an fsync'd SQLite commit), engine, noise.
  raw    the analyst's query itself on a plain read-only DuckDB connection: no privacy at all.
  floor  the fastest correct variant in FLOORS: hand-written DuckDB SQL giving dpsql's guarantee
         (per-(unit, group) pre-aggregation, salted-hash group choice where a unit can reach more
         groups than allowed, per-unit clamps, exact sums, public-domain key filter), without noise.
  pk     dpsql and raw on `people_pk`, whose person_id is a PRIMARY KEY (dpsql's shortcut: rows are
         only clipped, no per-unit pre-aggregation).

Before timing, every floor variant and dpsql's rewritten SQL are run once with the same salt and
their exact (un-noised) results compared; a variant that disagrees is reported loudly and is never
chosen as the floor. Where dpsql misses its 1.2x-floor target, the report adds the top operators of
EXPLAIN ANALYZE for dpsql's rewrite and for the floor.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import duckdb
import sqlglot

import dpsql
from dpsql import datagen
from dpsql.rewrite import to_sql

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / ".data"
DEFAULT_OUT = HERE / "results" / "core.md"

FLOOR_TARGET = 1.2        # dpsql <= 1.2x floor
PK_TARGET = 1.5           # on people_pk: dpsql <= 1.5x raw
OVERHEAD_TARGET_MS = 2.0  # parse + analysis + rewrite p50

# --- the policy's constants, written out so the floor SQL reads like SQL (verification catches drift)
STATES_IN = "state IN ('CA', 'FL', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA')"          # public domain of state
EDUCATION_IN = "education IN ('none', 'high_school', 'bachelor', 'master', 'phd')"  # public domain of education
INCOME = "CASE WHEN income < 0 THEN 0 WHEN income > 500000 THEN 500000 ELSE income END"  # row clamp, NULL stays NULL
COST = "CASE WHEN cost < 0 THEN 0 WHEN cost > 2000 THEN 2000 ELSE cost END"
# dpsql sums DOUBLE columns exactly as DECIMAL(18, 6) (bounds < 1e7 -> scale 6); "scaled" variants sum the
# same grid as BIGINT micro-units: CAST(x * 1000000 AS BIGINT) rounds like the DECIMAL cast, and the
# rounding is monotone, so clamped values stay within the bounds.


@dataclass(frozen=True)
class Floor:
    """One hand-written variant. `scales[i]` divides result column i to get dpsql's units."""
    name: str
    sql: str
    scales: tuple[int, ...] = ()


@dataclass(frozen=True)
class Query:
    key: str
    title: str
    sql: str
    pk: bool                        # also run on people_pk
    floors: tuple[Floor, ...]

    @property
    def pk_sql(self) -> str:
        return self.sql.replace("FROM people", "FROM people_pk")


# Every floor returns dpsql's rewrite columns in order: group key, then the measures (an AVG is the
# centered sum of 2*x - (lo + hi) and the count).  people: max_rows_per_unit 1, max_groups_per_unit 1;
# visits: max_rows_per_unit 5, max_groups_per_unit 2.  A per-unit SUM of values in [0, hi] is >= 0, so
# only its upper clamp is written; clamps of sums use CASE, not LEAST, because LEAST(NULL, hi) is hi in
# DuckDB (a unit whose values are all NULL would gain hi).  LEAST is fine on counts (never NULL).
QUERIES: tuple[Query, ...] = (
    Query("Q1", "COUNT", "SELECT COUNT(*) FROM people", True, (
        # max_rows_per_unit = 1: the clamped per-unit count is 1 for every unit, i.e. a distinct count.
        Floor("distinct_subquery", """
            SELECT COUNT(*)
            FROM (SELECT DISTINCT person_id FROM people WHERE person_id IS NOT NULL)"""),
        Floor("count_distinct", """
            SELECT COUNT(DISTINCT person_id) FROM people"""),
        Floor("per_unit_least", """
            SELECT SUM(LEAST(n, 1))
            FROM (SELECT COUNT(*) AS n FROM people WHERE person_id IS NOT NULL GROUP BY person_id)"""),
    )),
    Query("Q2", "GROUP BY COUNT", "SELECT state, COUNT(*) FROM people GROUP BY state", True, (
        # max_groups 1 and max_rows 1: each unit adds exactly 1 to the one state it keeps, the one with
        # the smallest salted hash among its states; arg_min over its rows finds it in one aggregation.
        Floor("arg_min_rows", f"""
            SELECT state, COUNT(*)
            FROM (SELECT arg_min(state, hash(person_id, state, $salt)) AS state
                  FROM people
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  GROUP BY person_id)
            GROUP BY state"""),
        Floor("qualify", f"""
            SELECT state, SUM(LEAST(n, 1))
            FROM (SELECT state, COUNT(*) AS n
                  FROM people
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  GROUP BY person_id, state
                  QUALIFY row_number() OVER (PARTITION BY person_id ORDER BY hash(person_id, state, $salt)) <= 1)
            GROUP BY state"""),
        Floor("arg_min_per_group", f"""
            SELECT state, SUM(LEAST(n, 1))
            FROM (SELECT arg_min(state, h) AS state, arg_min(n, h) AS n
                  FROM (SELECT person_id, state, COUNT(*) AS n, hash(person_id, state, $salt) AS h
                        FROM people
                        WHERE person_id IS NOT NULL AND {STATES_IN}
                        GROUP BY person_id, state)
                  GROUP BY person_id)
            GROUP BY state"""),
    )),
    Query("Q3", "SUM", "SELECT SUM(income) FROM people", True, (
        Floor("per_unit_decimal", f"""
            SELECT SUM(CASE WHEN s > 500000 THEN 500000 ELSE s END)
            FROM (SELECT SUM(CAST({INCOME} AS DECIMAL(18, 6))) AS s
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id)"""),
        Floor("per_unit_scaled_bigint", f"""
            SELECT SUM(CASE WHEN s > 500000000000 THEN 500000000000 ELSE s END)
            FROM (SELECT SUM(CAST({INCOME} * 1000000 AS BIGINT)) AS s
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id)""", (10**6,)),
    )),
    Query("Q4", "AVG", "SELECT AVG(income) FROM people", True, (
        Floor("per_unit_centered_rows", f"""
            SELECT SUM(CASE WHEN c < -500000 THEN -500000 WHEN c > 500000 THEN 500000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT SUM(2 * CAST({INCOME} AS DECIMAL(18, 6)) - 500000) AS c, COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id)"""),
        # center per unit instead of per row: sum(2x - 500000) = 2 * sum(x) - 500000 * count(x)
        Floor("per_unit_centered_late", f"""
            SELECT SUM(CASE WHEN c < -500000 THEN -500000 WHEN c > 500000 THEN 500000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT 2 * SUM(CAST({INCOME} AS DECIMAL(18, 6))) - 500000 * COUNT(income) AS c,
                         COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id)"""),
        Floor("per_unit_centered_late_scaled_bigint", f"""
            SELECT SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT 2 * SUM(CAST({INCOME} * 1000000 AS BIGINT)) - 500000000000 * COUNT(income) AS c,
                         COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id)""", (10**6, 1)),
    )),
    Query("Q5", "GROUP BY AVG + WHERE",
          "SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education", True, (
        # per (unit, education), then each unit keeps its group with the smallest salted hash
        Floor("arg_min_struct", f"""
            SELECT u.education,
                   SUM(CASE WHEN u.c < -500000 THEN -500000 WHEN u.c > 500000 THEN 500000 ELSE u.c END),
                   SUM(LEAST(u.n, 1))
            FROM (SELECT arg_min({{'education': education, 'c': c, 'n': n}}, h) AS u
                  FROM (SELECT person_id, education,
                               SUM(2 * CAST({INCOME} AS DECIMAL(18, 6)) - 500000) AS c,
                               COUNT(income) AS n,
                               hash(person_id, education, $salt) AS h
                        FROM people
                        WHERE person_id IS NOT NULL AND age > 30 AND {EDUCATION_IN}
                        GROUP BY person_id, education)
                  GROUP BY person_id)
            GROUP BY u.education"""),
        Floor("qualify", f"""
            SELECT education,
                   SUM(CASE WHEN c < -500000 THEN -500000 WHEN c > 500000 THEN 500000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT education,
                         SUM(2 * CAST({INCOME} AS DECIMAL(18, 6)) - 500000) AS c,
                         COUNT(income) AS n
                  FROM people
                  WHERE person_id IS NOT NULL AND age > 30 AND {EDUCATION_IN}
                  GROUP BY person_id, education
                  QUALIFY row_number() OVER (PARTITION BY person_id
                                             ORDER BY hash(person_id, education, $salt)) <= 1)
            GROUP BY education"""),
        Floor("arg_min_struct_centered_late_scaled_bigint", f"""
            SELECT u.education,
                   SUM(CASE WHEN u.c < -500000000000 THEN -500000000000
                            WHEN u.c > 500000000000 THEN 500000000000 ELSE u.c END),
                   SUM(LEAST(u.n, 1))
            FROM (SELECT arg_min({{'education': education, 'c': 2 * s - 500000000000 * n, 'n': n}}, h) AS u
                  FROM (SELECT person_id, education,
                               SUM(CAST({INCOME} * 1000000 AS BIGINT)) AS s,
                               COUNT(income) AS n,
                               hash(person_id, education, $salt) AS h
                        FROM people
                        WHERE person_id IS NOT NULL AND age > 30 AND {EDUCATION_IN}
                        GROUP BY person_id, education)
                  GROUP BY person_id)
            GROUP BY u.education""", (1, 10**6, 1)),
    )),
    Query("Q6", "visits SUM GROUP BY state", "SELECT state, SUM(cost) FROM visits GROUP BY state", False, (
        # per (unit, state), each unit keeps its 2 states with the smallest salted hashes
        Floor("arg_min_n_unnest", f"""
            SELECT u.state, SUM(CASE WHEN u.s > 10000 THEN 10000 ELSE u.s END)
            FROM (SELECT unnest(arg_min({{'state': state, 's': s}}, h, 2)) AS u
                  FROM (SELECT person_id, state,
                               SUM(CAST({COST} AS DECIMAL(18, 6))) AS s,
                               hash(person_id, state, $salt) AS h
                        FROM visits
                        WHERE person_id IS NOT NULL AND {STATES_IN}
                        GROUP BY person_id, state)
                  GROUP BY person_id)
            GROUP BY u.state"""),
        Floor("qualify", f"""
            SELECT state, SUM(CASE WHEN s > 10000 THEN 10000 ELSE s END)
            FROM (SELECT state, SUM(CAST({COST} AS DECIMAL(18, 6))) AS s
                  FROM visits
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  GROUP BY person_id, state
                  QUALIFY row_number() OVER (PARTITION BY person_id ORDER BY hash(person_id, state, $salt)) <= 2)
            GROUP BY state"""),
        Floor("qualify_scaled_bigint", f"""
            SELECT state, SUM(CASE WHEN s > 10000000000 THEN 10000000000 ELSE s END)
            FROM (SELECT state, SUM(CAST({COST} * 1000000 AS BIGINT)) AS s
                  FROM visits
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  GROUP BY person_id, state
                  QUALIFY row_number() OVER (PARTITION BY person_id ORDER BY hash(person_id, state, $salt)) <= 2)
            GROUP BY state""", (1, 10**6)),
    )),
    # Joins (issue 13). visits x people: a joined row per visit, limits 5 x 1 rows and 2 x 1 groups per
    # person; bounding happens on the joined relation, exactly as on one table.
    Query("Q7", "visits JOIN people GROUP BY education, COUNT + SUM",
          "SELECT p.education, COUNT(*), SUM(v.cost) FROM visits v JOIN people p ON v.person_id = p.person_id "
          "GROUP BY p.education", False, (
        Floor("qualify_scaled_bigint", f"""
            SELECT education, SUM(LEAST(n, 5)), SUM(CASE WHEN s > 10000000000 THEN 10000000000 ELSE s END)
            FROM (SELECT v.person_id, p.education, COUNT(*) AS n,
                         SUM(CAST(CASE WHEN v.cost < 0 THEN 0 WHEN v.cost > 2000 THEN 2000 ELSE v.cost END
                                  * 1000000 AS BIGINT)) AS s
                  FROM visits v JOIN people p ON v.person_id = p.person_id
                  WHERE p.{EDUCATION_IN}
                  GROUP BY v.person_id, p.education
                  QUALIFY row_number() OVER (PARTITION BY v.person_id
                                             ORDER BY hash(v.person_id, p.education, $salt)) <= 2)
            GROUP BY education""", (1, 1, 10**6)),
        Floor("arg_min_n_unnest_scaled_bigint", f"""
            SELECT u.education, SUM(LEAST(u.n, 5)), SUM(CASE WHEN u.s > 10000000000 THEN 10000000000 ELSE u.s END)
            FROM (SELECT unnest(arg_min({{'education': education, 'n': n, 's': s}}, h, 2)) AS u
                  FROM (SELECT v.person_id, p.education, COUNT(*) AS n,
                               SUM(CAST(CASE WHEN v.cost < 0 THEN 0 WHEN v.cost > 2000 THEN 2000 ELSE v.cost END
                                        * 1000000 AS BIGINT)) AS s,
                               hash(v.person_id, p.education, $salt) AS h
                        FROM visits v JOIN people p ON v.person_id = p.person_id
                        WHERE p.{EDUCATION_IN}
                        GROUP BY v.person_id, p.education)
                  GROUP BY person_id)
            GROUP BY u.education""", (1, 1, 10**6)),
    )),
    # A public lookup table: its column is a key whose values are read from the public table.
    Query("Q8", "people JOIN regions (public) GROUP BY region, COUNT",
          "SELECT r.region, COUNT(*) FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region", False, (
        Floor("arg_min_rows", """
            SELECT region, COUNT(*)
            FROM (SELECT arg_min(r.region, hash(p.person_id, r.region, $salt)) AS region
                  FROM people p JOIN regions r ON p.state = r.state
                  GROUP BY p.person_id)
            GROUP BY region"""),
        # (COUNT(DISTINCT person_id) per region returns the same here, but it is no floor: a person with
        # rows in two regions would count in both, where the guarantee keeps one group per person.)
        Floor("qualify", """
            SELECT region, COUNT(*)
            FROM (SELECT p.person_id, r.region
                  FROM people p JOIN regions r ON p.state = r.state
                  GROUP BY p.person_id, r.region
                  QUALIFY row_number() OVER (PARTITION BY p.person_id
                                             ORDER BY hash(p.person_id, r.region, $salt)) <= 1)
            GROUP BY region"""),
    )),
)
REGIONS = (("CA", "West"), ("WA", "West"), ("NY", "Northeast"), ("PA", "Northeast"), ("OH", "Midwest"),
           ("IL", "Midwest"), ("TX", "South"), ("FL", "South"))


# --- data, policy, connections ----------------------------------------------------------------------

def data_path(people: int, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"core_{people}.duckdb"


def ensure_data(people: int, data_dir: Path = DATA_DIR) -> tuple[Path, bool]:
    """The database for `people`, generated unless a file with the right row counts exists."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_path(people, data_dir)
    if path.exists():
        try:
            con = duckdb.connect(str(path), read_only=True)
            try:
                n, n_pk, has_visits, has_regions = con.execute(
                    "SELECT (SELECT COUNT(*) FROM people), (SELECT COUNT(*) FROM people_pk), "
                    "(SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = 'visits'), "
                    "(SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = 'regions')").fetchone()
            finally:
                con.close()
            if n == people and n_pk == people and has_visits:
                if not has_regions:
                    _regions(path)
                return path, False
        except duckdb.Error:
            pass
    con = duckdb.connect(str(path))
    try:
        con.execute("SET enable_progress_bar = false")
        datagen.generate(con, people, seed=0, primary_key_copy=True)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    _regions(path)
    return path, True


def _regions(path: Path) -> None:
    """The public lookup table regions(state, region) of Q8."""
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE OR REPLACE TABLE regions (state VARCHAR, region VARCHAR)")
        con.executemany("INSERT INTO regions VALUES (?, ?)", list(REGIONS))
        con.execute("CHECKPOINT")
    finally:
        con.close()


def bench_policy(ledger: Path) -> dict[str, Any]:
    """The demo policy with a budget the benchmark never exhausts, and people_pk protected like people.

    The answer cache is off (every timed run repeats its query: a cache would answer all but the
    first without running anything), and so is the release timing of [timing] (a policy's choice of
    latency, not work: README "What dpsql defends against")."""
    pol = datagen.demo_policy(ledger=str(ledger), epsilon=1e9)
    pol["reconstruction"] = {"cache_lifetime": 0}
    pol["timing"] = {"quantum": 0, "floor": 0}
    pol["tables"]["people_pk"] = copy.deepcopy(pol["tables"]["people"])
    pol["public"] = {"tables": ["regions"]}
    return pol


def _fresh_ledger(data_dir: Path) -> Path:
    ledger = data_dir / "bench_ledger.sqlite"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(ledger) + suffix).unlink(missing_ok=True)
    return ledger


def open_connections(path: Path, threads: int, ledger: Path) -> tuple[Any, duckdb.DuckDBPyConnection]:
    """(dpsql connection, raw read-only duckdb connection) on the same DuckDB instance and threads."""
    conn = dpsql.connect(str(path), policy=bench_policy(ledger), analyst="bench", threads=threads)
    from dpsql.engines import duckdb as dpsql_duckdb
    locked = getattr(dpsql_duckdb, "LOCKED_CONFIG", None) or getattr(dpsql_duckdb, "_LOCKED_CONFIG", {})
    try:
        # DuckDB shares one instance per file in a process only when the configuration matches.
        raw = duckdb.connect(str(path), read_only=True, config=dict(locked, threads=threads))
    except duckdb.Error:
        raw = conn.session.engine._con.cursor()   # a second plain connection to the same instance
    return conn, raw


# --- measuring ----------------------------------------------------------------------------------------

def _run_raw(raw: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[tuple]:
    return raw.execute(sql, params if (params and "$salt" in sql) else None).fetchall()


def _salt() -> int:
    return random.getrandbits(63)   # what dpsql binds: a fresh 63-bit integer per query


def time_interleaved(tasks: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Wall-clock ms of each task's runs after one warm-up; rounds interleave tasks in rotating order."""
    names = list(tasks)
    for name in names:
        tasks[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            t0 = time.perf_counter()
            tasks[name]()
            samples[name].append((time.perf_counter() - t0) * 1000)
    return samples


def _exact(v: Any, scale: int = 1) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, Decimal)):
        return Fraction(v) / scale
    if isinstance(v, float):
        return Fraction(v) / scale        # floats should not occur: exact sums only
    return v


def _normalize(rows: list[tuple], scales: tuple[int, ...] = ()) -> list[tuple]:
    out = []
    for r in rows:
        out.append(tuple(_exact(v, scales[i] if i < len(scales) else 1) for i, v in enumerate(r)))
    return sorted(out, key=lambda t: tuple(str(x) for x in t))


@dataclass
class Check:
    variant: str
    ok: bool
    detail: str = ""


def verify(conn, raw, q: Query) -> list[Check]:
    """dpsql's rewrite vs every floor variant, exact and un-noised, with the same salt (1)."""
    plan = conn.session.plan(q.sql)
    sql = to_sql(plan, "duckdb")
    bind = {"salt": 1} if "$salt" in sql else None
    # dpsql's sums are integers at each measure's scale (centered sums stay doubled, as in the floors)
    scales = (1,) * len(plan.keys) + tuple(m.scale for m in plan.measures)
    expected = _normalize(conn.session.engine.run(sql, bind).rows, scales)
    checks = []
    for f in q.floors:
        try:
            got = _normalize(_run_raw(raw, f.sql, {"salt": 1}), f.scales)
        except duckdb.Error as err:
            checks.append(Check(f.name, False, f"failed: {err}"))
            continue
        if got == expected:
            checks.append(Check(f.name, True))
        else:
            checks.append(Check(f.name, False, f"dpsql rewrite {_short(expected)} != floor {_short(got)}"))
    return checks


def _short(rows: list[tuple]) -> str:
    text = ", ".join("(" + ", ".join(str(v) for v in r) + ")" for r in rows[:3])
    return f"[{text}{', ...' if len(rows) > 3 else ''}]"


@dataclass
class Row:
    query: Query
    dpsql_ms: float
    raw_ms: float
    floor_ms: float | None
    floor_name: str | None
    variants: dict[str, float]
    checks: list[Check]
    pk_dpsql_ms: float | None = None
    pk_raw_ms: float | None = None
    min_ms: dict[str, float] = field(default_factory=dict)   # fastest run of each task, for judging noise
    profile: dict[str, list[str]] = field(default_factory=dict)

    @property
    def vs_floor(self) -> float | None:
        return self.dpsql_ms / self.floor_ms if self.floor_ms else None

    @property
    def vs_floor_fastest(self) -> float | None:
        """dpsql/floor from each side's fastest run: a check on the median when the machine was noisy."""
        f = self.min_ms.get("floor:" + self.floor_name) if self.floor_name else None
        return self.min_ms["dpsql"] / f if f and "dpsql" in self.min_ms else None

    @property
    def vs_raw(self) -> float:
        return self.dpsql_ms / self.raw_ms

    @property
    def pk_vs_raw(self) -> float | None:
        return self.pk_dpsql_ms / self.pk_raw_ms if self.pk_dpsql_ms is not None else None


@dataclass
class SizeResult:
    people: int
    visits: int
    repeat: int
    threads: int
    rows: list[Row]
    seconds: float
    generated: bool
    load: tuple[tuple[float, ...], tuple[float, ...]]


def measure_query(conn, raw, q: Query, repeat: int, checks: list[Check]) -> Row:
    cur = conn.cursor()

    def private(sql: str) -> Callable[[], object]:
        def run() -> object:
            cur.execute(sql)
            return cur.fetchall()
        return run

    def plain(sql: str) -> Callable[[], object]:
        if "$salt" in sql:
            return lambda: raw.execute(sql, {"salt": _salt()}).fetchall()
        return lambda: raw.execute(sql).fetchall()

    good = {c.variant for c in checks if c.ok}
    tasks: dict[str, Callable[[], object]] = {"dpsql": private(q.sql), "raw": plain(q.sql)}
    for f in q.floors:
        if f.name in good:
            tasks["floor:" + f.name] = plain(f.sql)
    samples = time_interleaved(tasks, repeat)
    if q.pk:   # timed apart: right after a 10M-group aggregation, a 1 ms query runs several times slower
        samples |= time_interleaved({"pk_dpsql": private(q.pk_sql), "pk_raw": plain(q.pk_sql)}, repeat)
    ms = {k: statistics.median(v) for k, v in samples.items()}
    fastest = {k: min(v) for k, v in samples.items()}
    variants = {k.split(":", 1)[1]: v for k, v in ms.items() if k.startswith("floor:")}
    best = min(variants, key=variants.get) if variants else None
    return Row(q, ms["dpsql"], ms["raw"], variants.get(best) if best else None, best, variants, checks,
               ms.get("pk_dpsql"), ms.get("pk_raw"), fastest)


def profile_operators(raw, sql: str, top: int = 4) -> list[str]:
    """The `top` most expensive operators of EXPLAIN ANALYZE (time summed over threads)."""
    params = {"salt": 1} if "$salt" in sql else None
    text = raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()[0][1]
    ops: list[tuple[float, str]] = []

    def walk(node: dict) -> None:
        info = node.get("extra_info") or {}
        what = "; ".join(f"{k}: {_flat(info[k])}" for k in ("Groups", "Aggregates", "Partition By", "Projections")
                         if k in info)
        ops.append((float(node.get("timing") or 0.0),
                    f"{node.get('type')} ({node.get('intermediate_rows', 0):,} rows) {what[:160]}"))
        for child in node.get("children") or []:
            walk(child)

    tree = json.loads(text)
    for node in tree.get("operator", []) if isinstance(tree, dict) else tree:
        walk(node)
    total = sum(t for t, _ in ops) or 1.0
    ops.sort(reverse=True)
    return [f"{t * 1000:.0f} ms ({t / total:.0%}) {d}" for t, d in ops[:top]]


def _flat(v: Any) -> str:
    return ", ".join(map(str, v)) if isinstance(v, list) else str(v)


def run_size(people: int, repeat: int, *, threads: int, data_dir: Path = DATA_DIR,
             log: Callable[[str], None] = print) -> SizeResult:
    start = time.perf_counter()
    load0 = os.getloadavg()
    path, generated = ensure_data(people, data_dir)
    conn, raw = open_connections(path, threads, _fresh_ledger(data_dir))
    try:
        visits = raw.execute("SELECT COUNT(*) FROM visits").fetchone()[0]
        rows = []
        for q in QUERIES:
            checks = verify(conn, raw, q)
            for c in checks:
                if not c.ok:
                    log(f"!!! {people:,} people, {q.key} floor variant {c.variant!r} DISAGREES with dpsql's "
                        f"rewrite: {c.detail}")
            row = measure_query(conn, raw, q, repeat, checks)
            if row.vs_floor is not None and row.vs_floor > FLOOR_TARGET:
                rewrite = to_sql(conn.session.plan(q.sql), "duckdb")
                floor_sql = next(f.sql for f in q.floors if f.name == row.floor_name)
                row.profile = {"dpsql rewrite": profile_operators(raw, rewrite),
                               f"floor ({row.floor_name})": profile_operators(raw, floor_sql)}
            log(f"  {people:,} {q.key}: dpsql {row.dpsql_ms:.1f} ms, floor {row.floor_ms or 0:.1f} ms "
                f"({row.floor_name}), raw {row.raw_ms:.1f} ms")
            rows.append(row)
    finally:
        raw.close()
        conn.close()
    return SizeResult(people, visits, repeat, threads, rows, time.perf_counter() - start, generated,
                      (load0, os.getloadavg()))


@dataclass
class Overhead:
    query: Query
    p50: float
    p95: float


def measure_overhead(conn, runs: int = 1000) -> list[Overhead]:
    """Python-side cost alone: session.plan(q, cached=False) then to_sql(plan, "duckdb"), per query:
    parse, analysis and rewrite from scratch (a session also keeps recent plans, which a repeated
    query reuses; that is not what is measured here). Q8's includes reading the public table's
    region values from the engine."""
    out = []
    for q in QUERIES:
        to_sql(conn.session.plan(q.sql, cached=False), "duckdb")
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            to_sql(conn.session.plan(q.sql, cached=False), "duckdb")
            samples.append((time.perf_counter() - t0) * 1000)
        samples.sort()
        out.append(Overhead(q, statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]))
    return out


def measure_ledger(conn, runs: int = 50) -> tuple[float, float] | None:
    """p50/p95 ms of one ledger charge (a durable SQLite commit), paid once by every private query."""
    ledger, budget = conn.session.ledger, conn.session.policy.budget
    try:
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            ledger.charge("bench-ledger", 1e-9, 0.0, epsilon_total=budget.epsilon, delta_total=budget.delta,
                          mechanism="laplace", params={}, query="benchmark")
            samples.append((time.perf_counter() - t0) * 1000)
    except Exception:      # an internal API; the benchmark does not depend on it
        return None
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


# --- reporting ----------------------------------------------------------------------------------------

def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def _ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _target(v: float | None, limit: float, fastest: float | None = None) -> str:
    if v is None:
        return "—"
    verdict = "met" if v <= limit else "**missed**"
    if fastest is not None and (fastest <= limit) != (v <= limit):
        verdict += f" (noisy: fastest runs give {fastest:.2f})"
    return verdict


TABLE_HEADER = ("| query | dpsql ms | floor ms | raw ms | dpsql/floor | dpsql/raw | pk dpsql ms | pk raw ms "
                f"| pk dpsql/raw | dpsql ≤ {FLOOR_TARGET}× floor | pk dpsql ≤ {PK_TARGET}× raw |")


def render_size(res: SizeResult) -> str:
    lines = [f"## {res.people:,} people ({res.visits:,} visits)", "",
             f"Median of {res.repeat} runs after one warm-up, {res.threads} DuckDB threads; "
             f"load average (1/5/15 min) {_load(res.load[0])} at start, {_load(res.load[1])} at end; "
             f"this size took {res.seconds:.0f} s{' (data generated)' if res.generated else ''}.", "",
             TABLE_HEADER, "|" + "---|" * 11]
    for r in res.rows:
        lines.append(f"| {r.query.key} {r.query.title} | {_ms(r.dpsql_ms)} | {_ms(r.floor_ms)} | {_ms(r.raw_ms)} "
                     f"| {_ratio(r.vs_floor)} | {_ratio(r.vs_raw)} | {_ms(r.pk_dpsql_ms)} | {_ms(r.pk_raw_ms)} "
                     f"| {_ratio(r.pk_vs_raw)} | {_target(r.vs_floor, FLOOR_TARGET, r.vs_floor_fastest)} "
                     f"| {_target(r.pk_vs_raw, PK_TARGET)} |")
    lines += ["", "Floor variants and dpsql (median and fastest run; the fastest correct variant by median is "
                  "the floor):", "",
              "| query | variant | median ms | min ms | same result as dpsql's rewrite (salt = 1) |",
              "|---|---|---|---|---|"]
    for r in res.rows:
        lines.append(f"| {r.query.key} | *dpsql end to end* | {_ms(r.dpsql_ms)} | {_ms(r.min_ms.get('dpsql'))} | — |")
        for c in r.checks:
            ms = r.variants.get(c.variant)
            mark = " (floor)" if c.variant == r.floor_name else ""
            same = "yes" if c.ok else f"**NO — {c.detail}**"
            lines.append(f"| {r.query.key} | {c.variant}{mark} | {_ms(ms)} | {_ms(r.min_ms.get('floor:' + c.variant))} "
                         f"| {same} |")
    bad = [(r.query.key, c) for r in res.rows for c in r.checks if not c.ok]
    if bad:
        lines += ["", "**!!! FLOOR/DPSQL MISMATCH: " + "; ".join(f"{k} {c.variant}" for k, c in bad)
                  + " — see the table above. !!!**"]
    else:
        lines += ["", "Verification: every floor variant returned exactly dpsql's bounded aggregates (before noise)."]
    for r in res.rows:
        if r.profile:
            lines += ["", f"Why {r.query.key} misses (EXPLAIN ANALYZE, top operators, time summed over threads):"]
            for who, ops in r.profile.items():
                lines.append(f"- {who}:")
                lines += [f"  - {op}" for op in ops]
    return "\n".join(lines)


def _load(t: tuple[float, ...]) -> str:
    return "/".join(f"{x:.1f}" for x in t)


def render_overhead(over: list[Overhead], ledger: tuple[float, float] | None, runs: int) -> str:
    lines = ["## Python-side overhead", "",
             f"`session.plan(q)` then `dpsql.rewrite.to_sql(plan, \"duckdb\")`, {runs} runs per query.", "",
             f"| query | p50 ms | p95 ms | p50 < {OVERHEAD_TARGET_MS:g} ms |", "|---|---|---|---|"]
    for o in over:
        lines.append(f"| {o.query.key} {o.query.title} | {o.p50:.3f} | {o.p95:.3f} "
                     f"| {'met' if o.p50 < OVERHEAD_TARGET_MS else '**missed**'} |")
    if ledger:
        lines += ["", f"Also paid once per private query (not in the table): the ledger charge, a durable "
                      f"SQLite commit: p50 {ledger[0]:.2f} ms, p95 {ledger[1]:.2f} ms."]
    return "\n".join(lines)


def machine() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True, timeout=10).stdout.strip() or "?"
    except Exception:
        commit = "?"
    return (f"Machine: {os.cpu_count()} cores, {platform.machine()} {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, sqlglot {sqlglot.__version__}, "
            f"dpsql {dpsql.__version__} (commit {commit}).")


def render_report(sizes: list[SizeResult], over: list[Overhead], ledger, runs: int, argv: list[str]) -> str:
    threads = sizes[0].threads if sizes else "?"
    head = ["# dpsql core benchmark", "",
            f"`python benchmarks/bench_core.py {' '.join(argv)}`".replace("  ", " ") + f" — {_dt.date.today()}", "",
            machine() + f" DuckDB threads: {threads}.", "",
            f"Targets: dpsql ≤ {FLOOR_TARGET}× floor on every query; on people_pk dpsql ≤ {PK_TARGET}× raw; "
            f"parse + analysis + rewrite p50 < {OVERHEAD_TARGET_MS:g} ms. Columns are explained in "
            "benchmarks/README.md; the floor SQL is in benchmarks/bench_core.py (the `floors` of each entry in QUERIES)."]
    parts = ["\n".join(head)] + [render_size(s) for s in sizes] + [render_overhead(over, ledger, runs)]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated numbers of people")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (after one warm-up)")
    ap.add_argument("--repeat-large", type=int, default=None,
                    help="timed runs for sizes >= 5,000,000 (default: --repeat)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="DuckDB threads")
    ap.add_argument("--overhead-runs", type=int, default=1000, help="runs per query for the Python overhead")
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report ('-' for stdout only)")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)   # noqa: E731
    results = []
    for n in sizes:
        repeat = args.repeat_large if (args.repeat_large and n >= 5_000_000) else args.repeat
        log(f"size {n:,}: repeat {repeat}")
        results.append(run_size(n, repeat, threads=args.threads, data_dir=args.data_dir, log=log))
    path, _ = ensure_data(sizes[0] if sizes else 1000, args.data_dir)
    conn, raw = open_connections(path, args.threads, _fresh_ledger(args.data_dir))
    try:
        over = measure_overhead(conn, args.overhead_runs)
        ledger = measure_ledger(conn)
    finally:
        raw.close()
        conn.close()
    report = render_report(results, over, ledger, args.overhead_runs, argv)
    print(report)
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
