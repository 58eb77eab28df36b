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
import dataclasses
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
import psycopg
import sqlglot

import dpsql
import dpsql.release
from dpsql import datagen
from dpsql.rewrite import to_sql

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / ".data"
DEFAULT_OUT = HERE / "results" / "core.md"

LARGE = 5_000_000         # sizes from here take --repeat-large runs (and no separate warm-up on PostgreSQL)
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
    pg_floors: tuple[Floor, ...] = ()   # PostgreSQL floor variants (--engines postgres runs the queries that have some)

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
# --- PostgreSQL floors (--engines postgres) -------------------------------------------------------------
# The same guarantee in PostgreSQL's SQL: the group choice orders by dpsql's salted hash (the key's text
# hash seeded with the unit XOR the salt; the key itself after it breaks ties; the keys here are never
# NULL, so dpsql's fallback for a NULL key is left out), so with salt 1 every variant keeps exactly the
# groups dpsql keeps.
# Sums are exact BIGINT micro-units (a clamped DOUBLE times 10^6, rounded by the cast: monotone, so the
# clamped value stays within the scaled bounds), summed across units as PostgreSQL's SUM(BIGINT)
# (NUMERIC result, 128-bit accumulator). Analyst WHERE clauses are pushed into WHERE, as in the DuckDB
# floors (dpsql evaluates them as a per-row FILTER flag, which never drops a unit: docs/PRIVACY.md, "What dpsql defends against").
PG_ORDER = 'hashtextextended({key} COLLATE pg_catalog."C", CAST(person_id AS BIGINT) # %(salt)s), {key}'
INCOME_MICRO = f"CAST({INCOME} * 1000000 AS BIGINT)"
COST_MICRO = f"CAST({COST} * 1000000 AS BIGINT)"
PG_FLOORS: dict[str, tuple[Floor, ...]] = {
    "Q1": (
        Floor("count_distinct", "SELECT COUNT(DISTINCT person_id) FROM people"),
        Floor("distinct_subquery", """
            SELECT COUNT(*) FROM (SELECT DISTINCT person_id FROM people WHERE person_id IS NOT NULL) AS u"""),
    ),
    "Q2": (
        # one row per unit kept: the one whose (unit, state) has the smallest salted hash
        Floor("distinct_on", f"""
            SELECT state, COUNT(*)
            FROM (SELECT DISTINCT ON (person_id) state
                  FROM people
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  ORDER BY person_id, {PG_ORDER.format(key="state")}) AS u
            GROUP BY state"""),
        Floor("row_number", f"""
            SELECT state, COUNT(*)
            FROM (SELECT state, row_number() OVER (PARTITION BY person_id ORDER BY {PG_ORDER.format(key="state")}) AS r
                  FROM people
                  WHERE person_id IS NOT NULL AND {STATES_IN}) AS u
            WHERE r <= 1
            GROUP BY state"""),
    ),
    "Q3": (
        Floor("per_unit_bigint", f"""
            SELECT SUM(CASE WHEN s > 500000000000 THEN 500000000000 ELSE s END)
            FROM (SELECT SUM({INCOME_MICRO}) AS s
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id) AS u""", (10**6,)),
        # the same, the per-unit rows asked for in unit order: a Sort and a streaming GroupAggregate
        # where the planner would otherwise pick a HashAggregate that spills (dialects.sorted_per_unit)
        Floor("per_unit_bigint_sorted", f"""
            SELECT SUM(CASE WHEN s > 500000000000 THEN 500000000000 ELSE s END)
            FROM (SELECT SUM({INCOME_MICRO}) AS s
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id ORDER BY person_id) AS u""",
              (10**6,)),
    ),
    "Q4": (
        Floor("per_unit_centered_late_bigint", f"""
            SELECT SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT 2 * SUM({INCOME_MICRO}) - 500000000000 * COUNT(income) AS c, COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id) AS u""", (10**6, 1)),
        Floor("per_unit_centered_rows_bigint", f"""
            SELECT SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT SUM(2 * {INCOME_MICRO} - 500000000000) AS c, COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id) AS u""", (10**6, 1)),
        Floor("per_unit_centered_rows_bigint_sorted", f"""
            SELECT SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT SUM(2 * {INCOME_MICRO} - 500000000000) AS c, COUNT(income) AS n
                  FROM people WHERE person_id IS NOT NULL GROUP BY person_id ORDER BY person_id) AS u""",
              (10**6, 1)),
    ),
    "Q5": (
        Floor("row_number", f"""
            SELECT education,
                   SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT education, SUM(2 * {INCOME_MICRO} - 500000000000) AS c, COUNT(income) AS n,
                         row_number() OVER (PARTITION BY person_id ORDER BY {PG_ORDER.format(key="education")}) AS r
                  FROM people
                  WHERE person_id IS NOT NULL AND age > 30 AND {EDUCATION_IN}
                  GROUP BY person_id, education) AS u
            WHERE r <= 1
            GROUP BY education""", (1, 10**6, 1)),
        Floor("distinct_on", f"""
            SELECT education,
                   SUM(CASE WHEN c < -500000000000 THEN -500000000000
                            WHEN c > 500000000000 THEN 500000000000 ELSE c END),
                   SUM(LEAST(n, 1))
            FROM (SELECT DISTINCT ON (person_id) education,
                         SUM(2 * {INCOME_MICRO} - 500000000000) AS c, COUNT(income) AS n
                  FROM people
                  WHERE person_id IS NOT NULL AND age > 30 AND {EDUCATION_IN}
                  GROUP BY person_id, education
                  ORDER BY person_id, {PG_ORDER.format(key="education")}) AS u
            GROUP BY education""", (1, 10**6, 1)),
    ),
    "Q6": (
        # per (unit, state), each unit keeps its 2 states with the smallest salted hashes
        Floor("row_number", f"""
            SELECT state, SUM(CASE WHEN s > 10000000000 THEN 10000000000 ELSE s END)
            FROM (SELECT state, SUM({COST_MICRO}) AS s,
                         row_number() OVER (PARTITION BY person_id ORDER BY {PG_ORDER.format(key="state")}) AS r
                  FROM visits
                  WHERE person_id IS NOT NULL AND {STATES_IN}
                  GROUP BY person_id, state) AS u
            WHERE r <= 2
            GROUP BY state""", (1, 10**6)),
    ),
}
QUERIES = tuple(dataclasses.replace(q, pg_floors=PG_FLOORS.get(q.key, ())) for q in QUERIES)
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
    latency, not work: docs/PRIVACY.md, "What dpsql defends against")."""
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


# --- PostgreSQL data (--engines postgres) ----------------------------------------------------------------
# Database `dpsql_core`, one schema n<N> per size, loaded from core_<N>.duckdb: DuckDB writes each table as
# CSV beside it, PostgreSQL reads it with COPY (the bytes streamed through psycopg), people_pk is copied
# from people inside PostgreSQL and given its PRIMARY KEY after the load, and every table is
# VACUUM (FREEZE, ANALYZE)d so that timed queries neither set hint bits nor plan without statistics.
# Reused while the row counts match (1M: ~15 s; 10M: ~2-3 min).
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
PG_CORE_DB = "dpsql_core"
PG_COLUMNS = {
    "people": "person_id BIGINT NOT NULL, age INTEGER, income DOUBLE PRECISION, state VARCHAR, "
              "sex VARCHAR, education VARCHAR",
    "visits": "visit_id BIGINT, person_id BIGINT NOT NULL, visit_date DATE, state VARCHAR, "
              "cost DOUBLE PRECISION, kind VARCHAR",
}


def pg_core_url(admin: str = PG_ADMIN) -> str:
    return admin.rsplit("/", 1)[0] + "/" + PG_CORE_DB


def _pg_counts(con: psycopg.Connection, schema: str) -> dict[str, int | None]:
    have: dict[str, int | None] = {}
    for t in ("people", "visits", "people_pk", "regions"):
        try:
            with con.transaction():
                have[t] = con.execute(f"SELECT COUNT(*) FROM {schema}.{t}").fetchone()[0]
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            have[t] = None
    return have


def ensure_postgres(people: int, duckdb_file: Path, regions: tuple = REGIONS, admin: str = PG_ADMIN,
                    log: Callable[[str], None] = print) -> tuple[str, str]:
    """(database URL, schema) holding the core tables for `people` (duckdb_file must exist)."""
    with psycopg.connect(admin, autocommit=True) as con:
        if not con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_CORE_DB]).fetchone():
            con.execute(f"CREATE DATABASE {PG_CORE_DB}")
    url, schema = pg_core_url(admin), f"n{people}"
    dcon = duckdb.connect(str(duckdb_file), read_only=True)
    try:
        want = {t: dcon.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in PG_COLUMNS}
        want |= {"people_pk": want["people"], "regions": len(regions)}
        with psycopg.connect(url, autocommit=True) as con:
            if _pg_counts(con, schema) == want:
                return url, schema
            t0 = time.perf_counter()
            log(f"  loading {people:,} people into PostgreSQL {PG_CORE_DB}.{schema}")
            con.execute("SET maintenance_work_mem = '1GB'")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            for t in ("people_pk", "regions", "people", "visits"):
                con.execute(f"DROP TABLE IF EXISTS {schema}.{t}")
            for t, cols in PG_COLUMNS.items():
                csv = duckdb_file.with_name(f"{duckdb_file.stem}_{t}.csv")
                names = ", ".join(c.split()[0] for c in cols.split(", "))
                dcon.execute(f"COPY (SELECT {names} FROM {t} ORDER BY person_id) TO '{csv}' (HEADER false)")
                con.execute(f"CREATE TABLE {schema}.{t} ({cols})")
                with con.cursor().copy(f"COPY {schema}.{t} ({names}) FROM STDIN (FORMAT csv)") as cp, \
                        open(csv, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        cp.write(chunk)
                csv.unlink()
                log(f"    {t}: {want[t]:,} rows, {time.perf_counter() - t0:.0f} s")
            con.execute(f"CREATE TABLE {schema}.people_pk AS SELECT * FROM {schema}.people")
            con.execute(f"ALTER TABLE {schema}.people_pk ADD PRIMARY KEY (person_id)")
            con.execute(f"CREATE TABLE {schema}.regions (state VARCHAR, region VARCHAR)")
            with con.cursor() as cur:
                cur.executemany(f"INSERT INTO {schema}.regions VALUES (%s, %s)", list(regions))
            for t in ("people", "visits", "people_pk", "regions"):
                con.execute(f"VACUUM (FREEZE, ANALYZE) {schema}.{t}")
            log(f"    loaded in {time.perf_counter() - t0:.0f} s")
    finally:
        dcon.close()
    return url, schema


def open_pg_connections(people: int, data_dir: Path, ledger: Path, admin: str = PG_ADMIN,
                        log: Callable[[str], None] = print) -> tuple[Any, psycopg.Connection, bool]:
    """(dpsql connection through its PostgreSQL engine, raw psycopg connection, data generated?).

    The raw connection runs with dpsql's transaction settings (JIT off, the server's work_mem) and
    never prepares statements, like dpsql's engine, so floors and raw queries plan as dpsql's do."""
    path, generated = ensure_data(people, data_dir)
    url, schema = ensure_postgres(people, path, admin=admin, log=log)
    conn = dpsql.connect(url, policy=bench_policy(ledger), analyst="bench", schema=schema)
    raw = psycopg.connect(url, autocommit=True, prepare_threshold=None)
    raw.execute(f"SET search_path = {schema}")
    raw.execute("SET jit = off")
    return conn, raw, generated


def _is_pg(raw: Any) -> bool:
    return isinstance(raw, psycopg.Connection)


# --- measuring ----------------------------------------------------------------------------------------

def _salted(sql: str) -> bool:
    return "$salt" in sql or "%(salt)s" in sql


def _run_raw(raw: Any, sql: str, params: dict | None = None) -> list[tuple]:
    """Run on the raw DuckDB or psycopg connection; params only when the text has the salt."""
    if _is_pg(raw):
        return raw.execute(sql, params if (params and _salted(sql)) else None, prepare=False).fetchall()
    return raw.execute(sql, params if (params and _salted(sql)) else None).fetchall()


def _salt() -> int:
    return random.getrandbits(63)   # what dpsql binds: a fresh 63-bit integer per query


def time_interleaved(tasks: dict[str, Callable[[], object]], repeat: int,
                     warmup: bool = True) -> dict[str, list[float]]:
    """Wall-clock ms of each task's runs after one warm-up (unless warmup is False); rounds
    interleave tasks in rotating order."""
    names = list(tasks)
    for name in names if warmup else ():
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
    sql = to_sql(plan, conn.session.engine.dialect)
    bind = {"salt": 1} if _salted(sql) else None
    # dpsql's sums are integers at each measure's scale (centered sums stay doubled, as in the floors)
    scales = (1,) * len(plan.keys) + tuple(m.scale for m in plan.measures)
    expected = _normalize(conn.session.engine.run(sql, bind).rows, scales)
    checks = []
    for f in (q.pg_floors if _is_pg(raw) else q.floors):
        try:
            got = _normalize(_run_raw(raw, f.sql, {"salt": 1}), f.scales)
        except (duckdb.Error, psycopg.Error) as err:
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
    pk_engine_ms: float | None = None         # dpsql's rewritten pk SQL alone, on the raw connection
    pk_parts: dict[str, float] = field(default_factory=dict)   # medians of the end-to-end run's parts (ms)
    python_peak: int | None = None            # bytes Python allocated at peak during one dpsql run (tracemalloc)

    @property
    def pk_fixed_ms(self) -> float | None:
        """dpsql's fixed per-query cost on the pk path: end to end minus the engine running its SQL."""
        return self.pk_dpsql_ms - self.pk_engine_ms if self.pk_engine_ms is not None else None

    @property
    def pk_engine_vs_raw(self) -> float | None:
        return self.pk_engine_ms / self.pk_raw_ms if self.pk_engine_ms is not None else None

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
    engine: str = "duckdb"
    engine_info: str = ""
    memory: dict[str, Any] = field(default_factory=dict)
    fsync: tuple[float, float] | None = None   # p50/p95 ms of a 4 kB write + fsync in the data directory


class Split:
    """Times the parts of dpsql's end-to-end runs by wrapping, on this one session, the engine's `run`
    (the query's transaction: schema facts, the charge callback, the query, fetching its rows), the
    ledger's `charge` (one durable SQLite commit) and dpsql.release's `release` (noise and release). The
    rest of a run is Python: parse, plan (cached by the session after the first run), rewrite text,
    post-processing and the cursor's fetch. The wrappers cost ~1 us per call."""

    PARTS = ("engine", "charge", "noise")

    def __init__(self, conn) -> None:
        self.session = conn.session
        self.current: dict[str, float] | None = None
        self.runs: list[dict[str, float]] = []
        # the session charges through charge_with_spending (Ledger.charge calls it too)
        self._wrapped = [(self.session.engine, "run", "engine"),
                         (self.session.ledger, "charge_with_spending", "charge"),
                         (dpsql.release, "release", "noise")]
        self._originals = [getattr(obj, name) for obj, name, _ in self._wrapped]
        for obj, name, key in self._wrapped:
            setattr(obj, name, self._timer(getattr(obj, name), key))

    def _timer(self, fn: Callable, key: str) -> Callable:
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.current is not None:
                    self.current[key] = self.current.get(key, 0.0) + (time.perf_counter() - t0) * 1000
        return timed

    def task(self, cur, sql: str) -> Callable[[], object]:
        def run() -> object:
            self.current = {}
            t0 = time.perf_counter()
            cur.execute(sql)
            rows = cur.fetchall()
            self.current["total"] = (time.perf_counter() - t0) * 1000
            self.runs.append(self.current)
            self.current = None
            return rows
        return run

    def medians(self, last: int) -> dict[str, float]:
        runs = self.runs[-last:]
        out = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in ("total",) + self.PARTS}
        out["engine_call"] = statistics.median(r.get("engine", 0.0) - r.get("charge", 0.0) for r in runs)
        out["python"] = statistics.median(r["total"] - r.get("engine", 0.0) - r.get("noise", 0.0) for r in runs)
        return out

    def close(self) -> None:
        for (obj, name, _), original in zip(self._wrapped, self._originals):
            if obj is dpsql.release:
                setattr(obj, name, original)
            else:
                obj.__dict__.pop(name, None)


def measure_query(conn, raw, q: Query, repeat: int, checks: list[Check], warmup: bool = True) -> Row:
    """warmup False: no separate warm-up round for the main tasks (verify has just run dpsql's
    rewrite and every floor variant once on the same data: used for PostgreSQL at 5M people and more,
    where one round of Q6 takes minutes)."""
    cur = conn.cursor()
    pg = _is_pg(raw)

    def private(sql: str) -> Callable[[], object]:
        def run() -> object:
            cur.execute(sql)
            return cur.fetchall()
        return run

    def plain(sql: str) -> Callable[[], object]:
        if _salted(sql):
            return lambda: _run_raw(raw, sql, {"salt": _salt()})
        return lambda: _run_raw(raw, sql)

    good = {c.variant for c in checks if c.ok}
    tasks: dict[str, Callable[[], object]] = {"dpsql": private(q.sql), "raw": plain(q.sql)}
    for f in (q.pg_floors if pg else q.floors):
        if f.name in good:
            tasks["floor:" + f.name] = plain(f.sql)
    samples = time_interleaved(tasks, repeat, warmup)
    parts: dict[str, float] = {}
    if q.pk:   # timed apart: right after a 10M-group aggregation, a 1 ms query runs several times slower
        split = Split(conn)
        try:
            engine_sql = to_sql(conn.session.plan(q.pk_sql), conn.session.engine.dialect)
            samples |= time_interleaved({"pk_dpsql": split.task(cur, q.pk_sql), "pk_raw": plain(q.pk_sql),
                                         "pk_engine": plain(engine_sql)}, repeat)
            parts = split.medians(repeat)
        finally:
            split.close()
    ms = {k: statistics.median(v) for k, v in samples.items()}
    fastest = {k: min(v) for k, v in samples.items()}
    variants = {k.split(":", 1)[1]: v for k, v in ms.items() if k.startswith("floor:")}
    best = min(variants, key=variants.get) if variants else None
    return Row(q, ms["dpsql"], ms["raw"], variants.get(best) if best else None, best, variants, checks,
               ms.get("pk_dpsql"), ms.get("pk_raw"), fastest, pk_engine_ms=ms.get("pk_engine"), pk_parts=parts)


def python_peak(conn, sql: str) -> int:
    """Peak bytes Python allocates while dpsql answers `sql` once (tracemalloc; engine memory excluded)."""
    import tracemalloc
    cur = conn.cursor()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        cur.execute(sql)
        cur.fetchall()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def profile_operators(raw, sql: str, top: int = 4) -> list[str]:
    """The `top` most expensive operators of EXPLAIN ANALYZE (DuckDB: time summed over threads;
    PostgreSQL: each node's own time, its children's subtracted, per loop times loops)."""
    if _is_pg(raw):
        return _profile_pg(raw, sql, top)
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


def _profile_pg(raw, sql: str, top: int) -> list[str]:
    params = {"salt": 1} if _salted(sql) else None
    plan = raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params, prepare=False).fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    ops: list[tuple[float, str]] = []

    def inclusive(node: dict) -> float:
        return float(node.get("Actual Total Time", 0.0)) * max(1, int(node.get("Actual Loops", 1)))

    def walk(node: dict) -> None:
        kids = node.get("Plans") or []
        own = inclusive(node) - sum(inclusive(k) for k in kids if k.get("Parent Relationship") != "InitPlan")
        what = node.get("Group Key") or node.get("Sort Key") or node.get("Output") or node.get("Relation Name") or ""
        spill = f", {node['Sort Method']} {node.get('Sort Space Used', '')} kB" if "Sort Method" in node else ""
        if node.get("Disk Usage"):
            spill += f", disk {node['Disk Usage']} kB"
        ops.append((max(own, 0.0), f"{node.get('Node Type')}"
                    f"{' ' + node['Strategy'] if node.get('Strategy') else ''} "
                    f"({int(node.get('Actual Rows', 0)) * max(1, int(node.get('Actual Loops', 1))):,} rows{spill}) "
                    f"{_flat(what)[:140]}"))
        for k in kids:
            walk(k)

    root = plan[0]["Plan"]
    walk(root)
    total = float(plan[0].get("Execution Time") or sum(t for t, _ in ops) or 1.0)
    ops.sort(reverse=True)
    return [f"{t:.0f} ms ({t / total:.0%} of {total:.0f} ms) {d}" for t, d in ops[:top]]


def _flat(v: Any) -> str:
    return ", ".join(map(str, v)) if isinstance(v, list) else str(v)


def _status_kb(pid: int | str, field_name: str) -> int | None:
    """A field of /proc/<pid>/status in kB (VmHWM: peak resident set; VmRSS: resident now)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's VmHWM (Linux >= 4.0: write 5 to clear_refs), so each size reports its own peak."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def measure_fsync(data_dir: Path, runs: int = 50) -> tuple[float, float]:
    """p50/p95 ms of writing 4 kB and fsync-ing it in the data directory (the ledger's disk)."""
    path = data_dir / "fsync_probe.bin"
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for i in range(runs):
            os.pwrite(fd, os.urandom(4096), (i % 16) * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


def _duckdb_memory(raw) -> int:
    """Bytes DuckDB holds now (its buffer manager's tags: data blocks, hash tables, ...)."""
    return int(raw.execute("SELECT COALESCE(SUM(memory_usage_bytes), 0) FROM duckdb_memory()").fetchone()[0])


def run_size(people: int, repeat: int, *, threads: int, data_dir: Path = DATA_DIR,
             log: Callable[[str], None] = print, engine: str = "duckdb", pg_admin: str = PG_ADMIN,
             queries: tuple[str, ...] | None = None, floors: dict[str, set[str]] | None = None) -> SizeResult:
    """One size on one engine. floors: query key -> the floor variants to run (default: all)."""
    start = time.perf_counter()
    load0 = os.getloadavg()
    reset = _reset_peak_rss()
    data_dir.mkdir(parents=True, exist_ok=True)
    fsync = measure_fsync(data_dir)
    pg = engine == "postgres"
    if pg:
        conn, raw, generated = open_pg_connections(people, data_dir, _fresh_ledger(data_dir), pg_admin, log)
        info = raw.execute("SELECT current_setting('server_version'), current_setting('max_parallel_workers_per_gather'),"
                           " current_setting('work_mem'), current_setting('shared_buffers')").fetchone()
        engine_info = (f"PostgreSQL {info[0].split()[0]}, max_parallel_workers_per_gather {info[1]}, work_mem "
                       f"{info[2]}, shared_buffers {info[3]}, JIT off (dpsql's setting, also on the raw connection)")
    else:
        path, generated = ensure_data(people, data_dir)
        conn, raw = open_connections(path, threads, _fresh_ledger(data_dir))
        engine_info = f"DuckDB {duckdb.__version__}, {threads} threads"
    memory: dict[str, Any] = {"reset": reset}
    try:
        visits = _run_raw(raw, "SELECT COUNT(*) FROM visits")[0][0]
        rows = []
        for q in QUERIES:
            if (pg and not q.pg_floors) or (queries and q.key not in queries):
                continue
            if floors and q.key in floors:
                keep = floors[q.key]
                q = dataclasses.replace(q, floors=tuple(f for f in q.floors if f.name in keep),
                                        pg_floors=tuple(f for f in q.pg_floors if f.name in keep))
            checks = verify(conn, raw, q)
            for c in checks:
                if not c.ok:
                    log(f"!!! {engine} {people:,} people, {q.key} floor variant {c.variant!r} DISAGREES with "
                        f"dpsql's rewrite: {c.detail}")
            row = measure_query(conn, raw, q, repeat, checks, warmup=not (pg and people >= LARGE))
            if not pg:
                memory["duckdb_max"] = max(memory.get("duckdb_max", 0), _duckdb_memory(raw))
            row.python_peak = python_peak(conn, q.sql)
            if row.vs_floor is not None and row.vs_floor > FLOOR_TARGET and not (pg and people >= LARGE):
                rewrite = to_sql(conn.session.plan(q.sql), conn.session.engine.dialect)
                floor_sql = next(f.sql for f in (q.pg_floors if pg else q.floors) if f.name == row.floor_name)
                row.profile = {"dpsql rewrite": profile_operators(raw, rewrite),
                               f"floor ({row.floor_name})": profile_operators(raw, floor_sql)}
            log(f"  {engine} {people:,} {q.key}: dpsql {row.dpsql_ms:.1f} ms, floor {row.floor_ms or 0:.1f} ms "
                f"({row.floor_name}), raw {row.raw_ms:.1f} ms; pk dpsql {row.pk_dpsql_ms or 0:.2f} ms, pk engine "
                f"{row.pk_engine_ms or 0:.2f} ms, pk raw {row.pk_raw_ms or 0:.2f} ms")
            rows.append(row)
        memory["process_hwm_kb"] = _status_kb("self", "VmHWM")
        if pg:
            memory["backend_hwm_kb"] = _status_kb(conn.session.engine._con.info.backend_pid, "VmHWM")
            memory["raw_backend_hwm_kb"] = _status_kb(raw.info.backend_pid, "VmHWM")
        else:
            memory["duckdb_limit"] = raw.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    finally:
        raw.close()
        conn.close()
    return SizeResult(people, visits, repeat, threads, rows, time.perf_counter() - start, generated,
                      (load0, os.getloadavg()), engine, engine_info, memory, fsync)


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
    label = "PostgreSQL" if res.engine == "postgres" else "DuckDB"
    lines = [f"## {label}: {res.people:,} people ({res.visits:,} visits)", "",
             f"Median of {res.repeat} runs after "
             f"{'the verification run (no separate warm-up)' if res.engine == 'postgres' and res.people >= LARGE else 'one warm-up'}"
             f", {res.engine_info}; "
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
            how = "each node's own time" if res.engine == "postgres" else "time summed over threads"
            lines += ["", f"Why {r.query.key} misses (EXPLAIN ANALYZE, top operators, {how}):"]
            for who, ops in r.profile.items():
                lines.append(f"- {who}:")
                lines += [f"  - {op}" for op in ops]
    split = render_split(res)
    if split:
        lines += ["", split]
    return "\n".join(lines)


SPLIT_HEADER = ("| query | pk dpsql ms | engine ms | raw ms | engine/raw | fixed ms | Python ms | ledger charge ms "
                "| engine call ms | noise ms | engine ≤ 1.5× raw | fixed ≤ fsync + 0.5 ms |")


def render_split(res: SizeResult) -> str:
    """The primary-key path's dpsql time as engine part + fixed part (issue 17, item 3)."""
    rows = [r for r in res.rows if r.pk_engine_ms is not None]
    if not rows:
        return ""
    fs = res.fsync[0] if res.fsync else None
    head = (f"Primary-key path split (people_pk): engine = dpsql's rewritten SQL alone on the raw connection, "
            f"interleaved with pk dpsql and pk raw; fixed = pk dpsql − engine. Parts of the end-to-end run "
            f"(medians, from wrappers on the session): Python = parse, plan (the session's plan cache), "
            f"rewrite text, noise-free post-processing, fetch; ledger charge = one durable SQLite commit; "
            f"engine call = dpsql's engine wrapper (transaction, schema facts, reading rows) minus the engine "
            f"time; noise = noise and release. fsync of a 4 kB write in the data directory: "
            + (f"p50 {res.fsync[0]:.2f} ms, p95 {res.fsync[1]:.2f} ms." if res.fsync else "not measured."))
    lines = [head, "", SPLIT_HEADER, "|" + "---|" * 12]
    for r in rows:
        p = r.pk_parts
        call = p["engine_call"] - r.pk_engine_ms if p else None
        fixed_ok = _target(r.pk_fixed_ms, fs + 0.5) if fs is not None else "—"
        lines.append(f"| {r.query.key} {r.query.title} | {_ms(r.pk_dpsql_ms)} | {_ms(r.pk_engine_ms)} | {_ms(r.pk_raw_ms)} "
                     f"| {_ratio(r.pk_engine_vs_raw)} | {_ms(r.pk_fixed_ms)} | {_ms(p.get('python'))} "
                     f"| {_ms(p.get('charge'))} | {_ms(call)} | {_ms(p.get('noise'))} "
                     f"| {_target(r.pk_engine_vs_raw, PK_TARGET)} | {fixed_ok} |")
    return "\n".join(lines)


def render_memory(sizes: list[SizeResult]) -> str:
    """Peak resident memory of dpsql's process and of the engine per size (issue 17, item 4)."""
    lines = ["## Memory", "",
             "Peak resident set (VmHWM of /proc/<pid>/status, reset at the start of each size) and dpsql's own "
             "Python allocations: the peak tracemalloc measures while dpsql answers each query once (after the "
             "timed runs), the largest over the queries. DuckDB is embedded, so its memory is in dpsql's "
             "process; `duckdb_memory()` is the most DuckDB's buffer manager held after any query. For "
             "PostgreSQL the engine is the backend serving dpsql's connection (VmHWM counts the shared_buffers "
             "pages it touched; parallel workers are separate processes, not counted).", "",
             "| engine | people | dpsql process peak RSS MB | dpsql Python peak per query KB | engine memory |",
             "|---|---|---|---|---|"]
    for res in sizes:
        m = res.memory
        hwm = m.get("process_hwm_kb")
        peak = max((r.python_peak for r in res.rows if r.python_peak is not None), default=None)
        if res.engine == "postgres":
            eng = (f"backend peak RSS {_mb(m.get('backend_hwm_kb'))} MB (raw connection's backend "
                   f"{_mb(m.get('raw_backend_hwm_kb'))} MB)")
            label = "PostgreSQL (Python and psycopg only)"
        else:
            eng = (f"DuckDB held up to {m.get('duckdb_max', 0) / 2**20:,.0f} MB (memory_limit "
                   f"{m.get('duckdb_limit', '?')}); in the process's RSS")
            label = "DuckDB (embedded: process includes the engine)"
        lines.append(f"| {label} | {res.people:,} | {_mb(hwm)} | {'—' if peak is None else f'{peak / 1024:,.0f}'} "
                     f"| {eng} |")
    if any(not s.memory.get("reset", True) for s in sizes):
        lines += ["", "(VmHWM could not be reset between sizes: a later size's peak includes the earlier ones.)"]
    return "\n".join(lines)


def _mb(kb: int | None) -> str:
    return "—" if kb is None else f"{kb / 1024:,.0f}"


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
            f"Targets: dpsql ≤ {FLOOR_TARGET}× floor on every query (each engine against its own floor); on "
            f"people_pk dpsql ≤ {PK_TARGET}× raw, split into the engine part ≤ {PK_TARGET}× raw and the fixed "
            f"part ≤ one fsync + 0.5 ms; parse + analysis + rewrite p50 < {OVERHEAD_TARGET_MS:g} ms. Columns are "
            "explained in benchmarks/README.md; the floor SQL is in benchmarks/bench_core.py (the `floors` of "
            "each entry in QUERIES, and PG_FLOORS for PostgreSQL)."]
    parts = (["\n".join(head)] + [render_size(s) for s in sizes] + [render_memory(sizes)]
             + [render_overhead(over, ledger, runs)])
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
    ap.add_argument("--engines", default="duckdb",
                    help="comma-separated: duckdb, postgres (PostgreSQL runs Q1-Q6 against its own floors)")
    ap.add_argument("--pg-admin", default=PG_ADMIN,
                    help="a PostgreSQL URL whose server gets the database dpsql_core (loaded once per size)")
    ap.add_argument("--queries", default="", help="comma-separated query keys to run (default: all)")
    ap.add_argument("--floors", default="",
                    help="restrict floor variants, e.g. Q2:distinct_on,Q5:row_number (default: every variant)")
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or set(engines) - {"duckdb", "postgres"}:
        ap.error("--engines takes duckdb and/or postgres")
    only = tuple(k.strip().upper() for k in args.queries.split(",") if k.strip()) or None
    floors: dict[str, set[str]] = {}
    for item in filter(None, (x.strip() for x in args.floors.split(","))):
        key, _, name = item.partition(":")
        floors.setdefault(key.upper(), set()).add(name)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)   # noqa: E731
    results = []
    for n in sizes:
        repeat = args.repeat_large if (args.repeat_large and n >= LARGE) else args.repeat
        for engine in engines:
            log(f"size {n:,}, {engine}: repeat {repeat}")
            results.append(run_size(n, repeat, threads=args.threads, data_dir=args.data_dir, log=log,
                                    engine=engine, pg_admin=args.pg_admin, queries=only, floors=floors or None))
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
