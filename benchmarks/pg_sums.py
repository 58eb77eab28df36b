"""PostgreSQL: per-unit sums in BIGINT where the bounds allow (EngineDialect.narrow_sums), A/B.

    python benchmarks/pg_sums.py [--people 1000000] [--repeat 5] [--data-dir DIR]

For the field benchmark's queries (benchmarks/field/run.py) on the same PostgreSQL data
(benchmarks/field/data.py loads it once per size), dpsql's rewritten SQL is generated twice,
with narrow sums (the default on PostgreSQL) and without (the previous NUMERIC arithmetic:
2*SUM(v) - (lo+hi)*COUNT(v) per unit and a NUMERIC sum across units), and each is timed on the
engine alone, alternately, after one warm-up run each: the median of --repeat runs. Both
texts return the same totals (checked: the salt is fixed, so the group choice is the same).
Prints one markdown table; ratios are taken within this run.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.field.data import ensure_postgres
from benchmarks.field.run import QUERIES
from dpsql import dialects
from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.datagen import demo_policy
from dpsql.policy import load_policy
from dpsql.rewrite import to_sql

PEOPLE = {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR", "sex": "VARCHAR",
          "education": "VARCHAR"}
VISITS = {"visit_id": "BIGINT", "person_id": "BIGINT", "visit_date": "DATE", "state": "VARCHAR",
          "cost": "DOUBLE", "kind": "VARCHAR"}


def rewrite(sql: str, schema_name: str, narrow: bool) -> str:
    pol = demo_policy(ledger="unused.sqlite")
    pol["tables"]["people"]["source"] = f"{schema_name}.people"
    pol["tables"]["visits"]["source"] = f"{schema_name}.visits"
    policy = load_policy(pol)
    schema = Schema({"people": PEOPLE, "visits": VISITS}, frozenset(), frozenset({"people", "visits"}))
    plan = analyze(classify(sql).tree, policy, schema, Settings(1.0, 1e-6, "laplace"), "postgres",
                   lambda table, column: None)
    saved = dialects.DIALECTS["postgres"]
    dialects.DIALECTS["postgres"] = dataclasses.replace(saved, narrow_sums=narrow)
    try:
        return to_sql(plan, "postgres")
    finally:
        dialects.DIALECTS["postgres"] = saved


def timed(con: psycopg.Connection, sql: str) -> tuple[float, list]:
    t0 = time.perf_counter()
    rows = con.execute(sql, {"salt": 1}, prepare=False).fetchall()
    return (time.perf_counter() - t0) * 1000, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "dpsql-bench")
    args = ap.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    url, schema_name = ensure_postgres(args.people, args.data_dir)
    out = []
    with psycopg.connect(url, autocommit=True) as con:
        version = con.execute("SHOW server_version").fetchone()[0]
        for key, (title, sql) in QUERIES.items():
            old, new = rewrite(sql, schema_name, False), rewrite(sql, schema_name, True)
            if old == new:
                out.append((key, title, None, None, "same SQL (no sum)"))
                continue
            _, a = timed(con, old)
            _, b = timed(con, new)
            same = sorted(map(repr, a)) == sorted(map(repr, b)) or _close(a, b)
            ta, tb = [], []
            for _ in range(args.repeat):
                ta.append(timed(con, old)[0])
                tb.append(timed(con, new)[0])
            out.append((key, title, statistics.median(ta), statistics.median(tb), "yes" if same else "**NO**"))
    print(f"# PostgreSQL per-unit sums: NUMERIC vs BIGINT (narrow_sums)\n\n"
          f"`python benchmarks/pg_sums.py --people {args.people} --repeat {args.repeat}`: PostgreSQL {version}, "
          f"{args.people:,} people, {platform.machine()}, Python {platform.python_version()}. Engine time of "
          f"dpsql's rewritten SQL alone (no parse, charge or noise), median of {args.repeat} alternating runs "
          f"after a warm-up.\n")
    print("| query | NUMERIC ms | BIGINT ms | BIGINT / NUMERIC | same totals |")
    print("|---|---|---|---|---|")
    for key, title, a, b, same in out:
        if a is None:
            print(f"| {key} {title} | — | — | — | {same} |")
        else:
            print(f"| {key} {title} | {a:.0f} | {b:.0f} | {b / a:.2f} | {same} |")


def _close(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(sorted(a, key=repr), sorted(b, key=repr)):
        for x, y in zip(ra, rb):
            if isinstance(x, (int, float)) or hasattr(x, "as_integer_ratio"):
                if float(x) != float(y):
                    return False
            elif x != y:
                return False
    return True


if __name__ == "__main__":
    main()
