"""dpsql against the floor: the best hand-written SQL with the same guarantee, same engine, same run.

    python benchmarks/floor.py [--sf 0.1] [--runs 7] [--postgres] [--data FILE] [--out benchmarks/results/floor.md]

Six TPC-H shapes (customer as the privacy unit, benchmarks/tpch_data.py's policy: lineitem links
to its order, nation, region, part and supplier public), each timed six ways in one run,
interleaved, median of --runs after a warm-up:

    dpsql     Session.execute of a text never seen before (parse, plan, rewrite, charge, engine,
              noise): what an analyst waits for, with the [timing] release delay off
    engine    dpsql's rewritten SQL alone, on the engine (the engine part of `dpsql`)
    floor     the hand-written SQL with the same guarantee: the unit resolved through the link,
              each input clamped to its bounds, each unit's total per group clamped to what
              max_rows_per_unit allows, at most L0 groups per unit where a unit could reach more
              (ranked only where it does), and the analyst's WHERE evaluated per row inside the
              aggregation (FILTER / CASE), never as a filter the engine can decide from its
              statistics (docs/PRIVACY.md, run time)
    rows      dpsql's rewritten SQL under the policy's [timing] where = "rows" (the WHERE a fenced
              row filter: every row read, only the passing ones grouped by unit; docs/PRIVACY.md)
    pushdown  the floor with the WHERE as a plain WHERE: what dropping the timing guarantee
              would buy (the engine may skip row groups by zone maps or pick an index); not
              offered by dpsql, measured to state the guarantee's cost
    plain     the query as written, no privacy

The floor's values are checked against the plain query's (the data respect the policy's bounds,
so bounding changes nothing): a floor that answered a different question would not be a floor.

Ratios: dpsql/floor, engine/floor (what dpsql's SQL costs beyond the floor), floor/plain and
pushdown/plain (the cost of the guarantee itself: per-unit bounding and reading every row).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tpch_data  # noqa: E402

import dpsql  # noqa: E402
from dpsql.rewrite import to_sql  # noqa: E402

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
LP = tpch_data.EXTENDEDPRICE            # l_extendedprice bounds
TP = tpch_data.TOTALPRICE               # o_totalprice bounds
K = tpch_data.MAX_ORDERS                # orders per customer (max_rows_per_unit of orders)
KL = tpch_data.MAX_ORDERS * tpch_data.MAX_LINES   # lines per customer (of lineitem)

# The clamped inputs, as the floor writes them (the policy's bounds, tpch_data.policy).
PRICE = f"LEAST(GREATEST(l_extendedprice, {LP[0]}), {LP[1]})"
DISC = "LEAST(GREATEST(l_discount, 0), 0.10)"
REV = f"({PRICE} * (1 - {DISC}))"


def _clamp(x: str, lo: float, hi: float) -> str:
    return f"LEAST(GREATEST({x}, {lo}), {hi})"


class Shape:
    """One shape: the analyst's query (dpsql and plain), the floor with the WHERE as `{p}`-flag
    and as a pushdown, and how its value columns compare."""

    def __init__(self, name: str, what: str, query: str, floor: Callable[[str, Any], str],
                 pushdown: Callable[[str, Any], str]):
        self.name, self.what, self.query, self.floor, self.pushdown = name, what, query, floor, pushdown


def _rank(u: str, keys: list[str], engine: str) -> str:
    """The floor's salted per-unit rank (the salt a literal: one per run is enough here)."""
    salt = random.getrandbits(62)
    if engine == "duckdb":
        h = f"hash({u}, {', '.join(keys)}, {salt})"
    else:
        h = f"hashtextextended(({u}, {', '.join(keys)})::text, {salt})"
    return f"ROW_NUMBER() OVER (PARTITION BY {u} ORDER BY {h})"


def _chosen(per_unit: str, keys: list[str], l0: int, engine: str) -> str:
    """Per-unit rows with at most l0 groups per unit: ranked only for units with more."""
    return (f"WITH p AS ({per_unit}), many AS (SELECT u FROM p GROUP BY u HAVING COUNT(*) > {l0}) "
            f"SELECT p.*, 1 AS r FROM p LEFT JOIN many ON many.u = p.u WHERE many.u IS NULL "
            f"UNION ALL SELECT * FROM (SELECT p.*, {_rank('u', keys, engine)} AS r FROM p "
            f"WHERE u IN (SELECT u FROM many)) AS q WHERE r <= {l0}")


# -- 1. one table carrying the unit, keys with a public domain
S1_WHERE = "o_orderdate >= DATE '1995-01-01' AND o_orderdate < DATE '1996-01-01'"
S1 = Shape(
    "single table", "orders: COUNT and SUM by a public-domain key",
    f"SELECT o_orderpriority, COUNT(*) AS n, SUM(o_totalprice) AS revenue FROM orders WHERE {S1_WHERE} "
    "GROUP BY o_orderpriority",
    lambda e, plan: (
        f"SELECT g, SUM(LEAST(n, {K})) AS n, SUM({_clamp('s', 0, K * TP[1])}) AS revenue FROM ("
        f"SELECT o_custkey AS u, o_orderpriority AS g, COUNT(*) FILTER (WHERE h) AS n, "
        f"SUM(CASE WHEN h THEN {_clamp('o_totalprice', TP[0], TP[1])} END) AS s FROM ("
        f"SELECT o_custkey, o_orderpriority, o_totalprice, ({S1_WHERE}) AS h FROM orders) AS r "
        "GROUP BY o_custkey, o_orderpriority) AS pu WHERE n > 0 GROUP BY g"),
    lambda e, plan: (
        f"SELECT g, SUM(LEAST(n, {K})) AS n, SUM({_clamp('s', 0, K * TP[1])}) AS revenue FROM ("
        f"SELECT o_custkey AS u, o_orderpriority AS g, COUNT(*) AS n, "
        f"SUM({_clamp('o_totalprice', TP[0], TP[1])}) AS s FROM orders WHERE {S1_WHERE} "
        "GROUP BY o_custkey, o_orderpriority) AS pu GROUP BY g"))

# -- 2. one link hop (TPC-H Q6)
S2_WHERE = ("l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
            "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24")
S2_X = f"{PRICE} * {DISC}"
S2 = Shape(
    "one link hop", "lineitem -> orders: Q6's SUM",
    f"SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE {S2_WHERE}",
    lambda e, plan: (
        f"SELECT SUM({_clamp('s', 0, KL * LP[1] // 10)}) AS revenue FROM ("
        f"SELECT o_custkey AS u, SUM(CASE WHEN h THEN {S2_X} END) AS s, COUNT(*) FILTER (WHERE h) AS n FROM ("
        f"SELECT o_custkey, l_extendedprice, l_discount, ({S2_WHERE}) AS h "
        "FROM lineitem JOIN orders ON l_orderkey = o_orderkey) AS r GROUP BY o_custkey) AS pu WHERE n > 0"),
    lambda e, plan: (
        f"SELECT SUM({_clamp('s', 0, KL * LP[1] // 10)}) AS revenue FROM ("
        f"SELECT o_custkey AS u, SUM({S2_X}) AS s FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
        f"WHERE {S2_WHERE} GROUP BY o_custkey) AS pu"))

# -- 3. two hops and public dimensions (TPC-H Q5): lineitem -> orders -> customer, nation, region
S3_WHERE = "r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'"
S3_FROM = ("customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
           "JOIN supplier ON l_suppkey = s_suppkey AND c_nationkey = s_nationkey "
           "JOIN nation ON s_nationkey = n_nationkey JOIN region ON n_regionkey = r_regionkey")


def _s3(e: str, plan, push: bool) -> str:
    flag = "" if push else f", COUNT(*) FILTER (WHERE {S3_WHERE}) AS n"
    value = REV if push else f"CASE WHEN {S3_WHERE} THEN {REV} END"
    per_unit = (f"SELECT c_custkey AS u, n_name AS g, SUM({value}) AS s{flag} FROM {S3_FROM} "
                f"{'WHERE ' + S3_WHERE if push else ''} GROUP BY c_custkey, n_name")
    rows = _chosen(per_unit, ["g"], plan.l0, e) if plan.group_choice else per_unit
    return (f"SELECT g, SUM({_clamp('s', 0, KL * LP[1])}) AS revenue FROM ({rows}) AS pu "
            f"{'' if push else 'WHERE n > 0'} GROUP BY g")


S3 = Shape("two hops, public dimensions", "customer, orders, lineitem, supplier, nation, region: Q5",
           f"SELECT n_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue FROM {S3_FROM} "
           f"WHERE {S3_WHERE} GROUP BY n_name",
           lambda e, plan: _s3(e, plan, False), lambda e, plan: _s3(e, plan, True))

# -- 4. a public table joined to a linked one (TPC-H Q14)
S4_WHERE = "l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'"
S4_PROMO = f"CASE WHEN p_type LIKE 'PROMO%' THEN {REV} ELSE 0 END"


def _s4(e: str, plan, push: bool) -> str:
    a, b = (S4_PROMO, REV) if push else (f"CASE WHEN {S4_WHERE} THEN {S4_PROMO} END",
                                         f"CASE WHEN {S4_WHERE} THEN {REV} END")
    flag = "" if push else f", COUNT(*) FILTER (WHERE {S4_WHERE}) AS n"
    return (f"SELECT 100.00 * SUM({_clamp('a', 0, KL * LP[1])}) / SUM({_clamp('b', 0, KL * LP[1])}) AS promo FROM ("
            f"SELECT o_custkey AS u, SUM({a}) AS a, SUM({b}) AS b{flag} FROM lineitem "
            "JOIN orders ON l_orderkey = o_orderkey JOIN part ON l_partkey = p_partkey "
            f"{'WHERE ' + S4_WHERE if push else ''} GROUP BY o_custkey) AS pu {'' if push else 'WHERE n > 0'}")


S4 = Shape("public dimension join", "lineitem -> orders, part: Q14's ratio of sums",
           "SELECT 100.00 * SUM(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * (1 - l_discount) ELSE 0 END) "
           "/ SUM(l_extendedprice * (1 - l_discount)) AS promo FROM lineitem, part "
           f"WHERE l_partkey = p_partkey AND {S4_WHERE}",
           lambda e, plan: _s4(e, plan, False), lambda e, plan: _s4(e, plan, True))

# -- 5. a semi-join (TPC-H Q4)
S5_WHERE = "o_orderdate >= DATE '1993-07-01' AND o_orderdate < DATE '1993-10-01'"
S5_INNER = "l_commitdate < l_receiptdate"


def _s5(e: str, plan, push: bool) -> str:
    if push:
        return (f"SELECT g, SUM(LEAST(n, {K})) AS order_count FROM (SELECT o_custkey AS u, o_orderpriority AS g, "
                f"COUNT(*) AS n FROM orders WHERE {S5_WHERE} AND EXISTS (SELECT 1 FROM lineitem "
                f"WHERE l_orderkey = o_orderkey AND {S5_INNER}) GROUP BY o_custkey, o_orderpriority) AS pu GROUP BY g")
    return (f"SELECT g, SUM(LEAST(n, {K})) AS order_count FROM (SELECT o_custkey AS u, o_orderpriority AS g, "
            f"COUNT(*) FILTER (WHERE {S5_WHERE} AND COALESCE(s.m, 0) > 0) AS n FROM orders LEFT JOIN "
            f"(SELECT l_orderkey, COUNT(*) FILTER (WHERE {S5_INNER}) AS m FROM lineitem GROUP BY l_orderkey) AS s "
            "ON s.l_orderkey = o_orderkey GROUP BY o_custkey, o_orderpriority) AS pu WHERE n > 0 GROUP BY g")


S5 = Shape("semi-join", "orders WHERE EXISTS (lineitem): Q4",
           f"SELECT o_orderpriority, COUNT(*) AS order_count FROM orders WHERE {S5_WHERE} AND EXISTS "
           f"(SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND {S5_INNER}) GROUP BY o_orderpriority",
           lambda e, plan: _s5(e, plan, False), lambda e, plan: _s5(e, plan, True))

# -- 6. many groups per unit (TPC-H Q7)
S6_WHERE = ("((n1.n_name = 'FRANCE' AND n2.n_name = 'GERMANY') OR (n1.n_name = 'GERMANY' AND n2.n_name = 'FRANCE')) "
            "AND l_shipdate BETWEEN DATE '1995-01-01' AND DATE '1996-12-31'")
S6_FROM = ("supplier JOIN lineitem ON s_suppkey = l_suppkey JOIN orders ON o_orderkey = l_orderkey "
           "JOIN customer ON c_custkey = o_custkey JOIN nation n1 ON s_nationkey = n1.n_nationkey "
           "JOIN nation n2 ON c_nationkey = n2.n_nationkey")


def _s6(e: str, plan, push: bool) -> str:
    flag = "" if push else f", COUNT(*) FILTER (WHERE {S6_WHERE}) AS n"
    value = REV if push else f"CASE WHEN {S6_WHERE} THEN {REV} END"
    per_unit = (f"SELECT o_custkey AS u, n1.n_name AS g0, n2.n_name AS g1, EXTRACT(YEAR FROM l_shipdate) AS g2, "
                f"SUM({value}) AS s{flag} FROM {S6_FROM} {'WHERE ' + S6_WHERE if push else ''} "
                "GROUP BY o_custkey, n1.n_name, n2.n_name, EXTRACT(YEAR FROM l_shipdate)")
    rows = _chosen(per_unit, ["g0", "g1", "g2"], plan.l0, e) if plan.group_choice else per_unit
    return (f"SELECT g0, g1, g2, SUM({_clamp('s', 0, KL * LP[1])}) AS revenue FROM ({rows}) AS pu "
            f"{'' if push else 'WHERE n > 0'} GROUP BY g0, g1, g2")


S6 = Shape("many groups per unit", "Q7: nation pairs by year, a group choice per unit",
           "SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation, EXTRACT(YEAR FROM l_shipdate) AS l_year, "
           f"SUM(l_extendedprice * (1 - l_discount)) AS revenue FROM {S6_FROM} WHERE {S6_WHERE} "
           "GROUP BY n1.n_name, n2.n_name, EXTRACT(YEAR FROM l_shipdate)",
           lambda e, plan: _s6(e, plan, False), lambda e, plan: _s6(e, plan, True))

SHAPES = [S1, S2, S3, S4, S5, S6]
WAYS = ("dpsql", "engine", "rows", "floor", "pushdown", "plain")


class Raw:
    """The engine's own connection, for the SQL timed outside dpsql."""

    def __init__(self, engine: str, target: str, conn):
        self.engine = engine
        if engine == "duckdb":
            self.con = conn.session.engine._con     # one file, one configuration: dpsql's own connection
        else:
            import psycopg
            self.con = psycopg.connect(target, autocommit=True)

    def run(self, sql: str, params: dict | None = None) -> list[tuple]:
        if self.engine == "duckdb":
            return self.con.execute(sql, params).fetchall() if params else self.con.execute(sql).fetchall()
        if params:
            sql = sql.replace("$salt", "%(salt)s")
        return self.con.execute(sql, params).fetchall()


def _values(rows: list[tuple]) -> list[tuple]:
    """Rows as sorted tuples of floats (keys as text), for comparing the floor with plain."""
    def v(x):
        return round(float(x), 2) if isinstance(x, (int, float, Decimal)) and not isinstance(x, bool) else str(x)
    return sorted(tuple(v(x) for x in r) for r in rows)


def _close(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            if isinstance(x, float) and isinstance(y, float):
                if abs(x - y) > 1e-6 * max(1.0, abs(y)):
                    return False
            elif x != y:
                return False
    return True


def run_shape(shape: Shape, engine: str, conn, raw: Raw, runs: int) -> dict[str, Any]:
    cur = conn.cursor()
    plan = conn.session.plan(shape.query, cached=False)
    rewritten = to_sql(plan, conn.session.engine.dialect)
    rows_sql = to_sql(dataclasses.replace(plan, where_rows=plan.where is not None), conn.session.engine.dialect)
    floor, push = shape.floor(engine, plan), shape.pushdown(engine, plan)
    plain_rows = raw.run(shape.query)
    ok = _close(_values(raw.run(floor)), _values(plain_rows)) and _close(_values(raw.run(push)), _values(plain_rows))
    counter = [0]

    def dpsql_once():
        counter[0] += 1
        cur.execute(f"/* floor.py {shape.name} {counter[0]} {random.random()} */ {shape.query}")
        cur.fetchall()

    salt = {"salt": random.getrandbits(62)} if "$salt" in rewritten or "%(salt)s" in rewritten else None
    fns = {"dpsql": dpsql_once, "engine": lambda: raw.run(rewritten, salt), "rows": lambda: raw.run(rows_sql, salt),
           "floor": lambda: raw.run(floor),
           "pushdown": lambda: raw.run(push), "plain": lambda: raw.run(shape.query)}
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for f in fns.values():                  # warm-up
        f()
    for _ in range(runs):
        order = list(WAYS)
        random.shuffle(order)
        for w in order:
            t0 = time.perf_counter()
            fns[w]()
            times[w].append(time.perf_counter() - t0)
    med = {w: statistics.median(ts) * 1000 for w, ts in times.items()}
    return {"shape": shape.name, "what": shape.what, "ms": med, "floor_matches_plain": ok,
            "group_choice": plan.group_choice, "l0": plan.l0}


def _policy(ledger: str) -> dict[str, Any]:
    pol = tpch_data.policy(ledger)
    pol["timing"] = {"quantum": 0, "floor": 0}
    return pol


def table(results: list[dict[str, Any]]) -> list[str]:
    head = ("| shape | dpsql | engine | rows | floor | pushdown | plain | dpsql/floor | engine/floor | "
            "floor/plain | rows/plain | pushdown/plain | floor = plain |")
    out = [head, "|" + "---|" * 13]
    for r in results:
        m = r["ms"]
        out.append(f"| {r['shape']} ({r['what']}) | {m['dpsql']:.1f} | {m['engine']:.1f} | {m['rows']:.1f} | "
                   f"{m['floor']:.1f} | {m['pushdown']:.1f} | {m['plain']:.1f} | {m['dpsql'] / m['floor']:.2f} | "
                   f"{m['engine'] / m['floor']:.2f} | {m['floor'] / m['plain']:.1f} | {m['rows'] / m['plain']:.1f} | "
                   f"{m['pushdown'] / m['plain']:.1f} | {'yes' if r['floor_matches_plain'] else 'NO'} |")
    ratios = [r["ms"]["dpsql"] / r["ms"]["floor"] for r in results]
    eng = [r["ms"]["engine"] / r["ms"]["floor"] for r in results]
    cost = [r["ms"]["floor"] / r["ms"]["plain"] for r in results]
    rows = [r["ms"]["rows"] / r["ms"]["plain"] for r in results]
    out.append("")
    out.append(f"dpsql/floor: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}; "
               f"engine/floor: median {statistics.median(eng):.2f}, max {max(eng):.2f}; "
               f"floor/plain (the guarantee's own cost): median {statistics.median(cost):.1f}, max {max(cost):.1f}; "
               f"rows/plain: median {statistics.median(rows):.1f}, max {max(rows):.1f}.")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per way (default 7)")
    ap.add_argument("--postgres", action="store_true", help="also on PostgreSQL (at " + PG_DSN + ")")
    ap.add_argument("--data", help="a TPC-H DuckDB file made by tpch_data.generate (default: generate one)")
    ap.add_argument("--out", help="write the tables to this Markdown file")
    args = ap.parse_args(argv)
    random.seed(0)
    lines = ["# dpsql against the floor", "",
             "Made by `python benchmarks/floor.py` (see its docstring for the six ways). ms, median of "
             f"{args.runs} interleaved runs after a warm-up; {os.cpu_count()} cores (shared).", ""]
    with tempfile.TemporaryDirectory() as tmp:
        db = args.data
        if db is None:
            db = os.path.join(tmp, "tpch.duckdb")
            print(f"generating TPC-H SF {args.sf:g} ...", file=sys.stderr)
            tpch_data.generate(db, args.sf, seed=0, threads=os.cpu_count())
        engines = [("duckdb", db)]
        if args.postgres:
            print("copying to PostgreSQL ...", file=sys.stderr)
            tpch_data.copy_to_postgres(db, PG_DSN)
            engines.append(("postgres", PG_DSN))
        for engine, target in engines:
            conn = dpsql.connect(target, policy=_policy(os.path.join(tmp, f"ledger_{engine}.sqlite")), analyst="a")
            raw = Raw(engine, target, conn)
            results = []
            for shape in SHAPES:
                print(f"{engine}: {shape.name} ...", file=sys.stderr)
                results.append(run_shape(shape, engine, conn, raw, args.runs))
            conn.close()
            lines += [f"## TPC-H SF {args.sf:g}, {engine}", ""] + table(results) + [""]
            print("\n".join(lines[-len(results) - 5:]))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
