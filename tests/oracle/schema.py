"""The oracle's schema, data and policy: a small TPC-H-shaped warehouse on which dpsql's bounding
is a no-op by construction.

    region(r_regionkey PK, r_name)                       public
    nation(n_nationkey PK, n_name, n_regionkey)          public
    customer(c_custkey PK, ...)                          the unit table (one row per unit)
    orders(o_orderkey PK, o_custkey, ...)                privacy_unit = o_custkey (one hop)
    lineitem(l_orderkey, l_linenumber, ...)              link = l_orderkey -> orders.o_orderkey (two hops)

Why bounding leaves the data alone (dpsql.analysis.relation, bind._finish): a query's per-unit
row limit is the product of max_rows_per_unit over the protected tables it names (links resolved
through an implicit join count as nothing), and likewise max_groups_per_unit. Every customer has
at most MAX_ORDERS orders and each order at most MAX_LINES lineitems, so a customer has at most
MAX_ORDERS rows of orders and MAX_ORDERS * MAX_LINES rows of lineitem (lineitem's limit counts rows
per customer). max_groups_per_unit equals max_rows_per_unit in every table, and a unit cannot
reach more groups than it has rows, so the salted group choice (dpsql.rewrite.group_choice) keeps
every group. Every value lies inside its declared bounds (some exactly at them) and inside its
declared public domain. Joins multiply both limits, and the joined rows of one customer never
exceed the product, so joins are no-ops too.

`o_total4` is 4 * o_totalprice with bounds 4x, and `l_negqty` is -l_quantity with bounds negated:
twins for the metamorphic scaling oracle.
"""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

import duckdb

MAX_ORDERS = 4
MAX_LINES = 3
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
STATUSES = ["F", "O", "P"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
FLAGS = ["A", "N", "R"]
SHIPMODES = ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]
CLERKS = [f"Clerk#{i:03d}" for i in range(1, 13)]      # declared without values: partition selection
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = 25

# (lower, upper) of every bounded column: negative, positive-only, fractional (dyadic and not).
BOUNDS = {
    "customer": {"c_acctbal": (-999.99, 9999.99), "c_age": (18, 90), "c_score": (-5.0, 5.0),
                 "c_since": (dt.date(2015, 1, 1), dt.date(2024, 12, 31))},
    "orders": {"o_totalprice": (0, 50000), "o_total4": (0, 200000), "o_shippriority": (0, 9),
               "o_weight": (0.5, 20.25), "o_orderdate": (dt.date(2020, 1, 1), dt.date(2024, 12, 31)),
               "o_ts": (dt.datetime(2020, 1, 1), dt.datetime(2024, 12, 31, 23, 59, 59))},
    "lineitem": {"l_linenumber": (1, MAX_LINES), "l_quantity": (1, 50), "l_negqty": (-50, -1),
                 "l_extendedprice": (0, 100000), "l_discount": (0, 0.10), "l_tax": (0, 0.08),
                 "l_delta": (-100, 100), "l_shipdate": (dt.date(2020, 1, 1), dt.date(2025, 3, 31))},
}
DOMAINS = {
    "customer": {"c_mktsegment": SEGMENTS, "c_nationkey": list(range(NATIONS))},
    "orders": {"o_orderstatus": STATUSES, "o_priority": PRIORITIES},
    "lineitem": {"l_returnflag": FLAGS, "l_shipmode": SHIPMODES},
}
DDL = {
    "region": "r_regionkey INTEGER PRIMARY KEY, r_name VARCHAR NOT NULL",
    "nation": "n_nationkey INTEGER PRIMARY KEY, n_name VARCHAR NOT NULL, n_regionkey INTEGER NOT NULL",
    "customer": ("c_custkey INTEGER PRIMARY KEY, c_nationkey INTEGER NOT NULL, c_mktsegment VARCHAR NOT NULL, "
                 "c_acctbal DECIMAL(12,2) NOT NULL, c_age INTEGER, c_score DOUBLE NOT NULL, c_since DATE NOT NULL"),
    "orders": ("o_orderkey INTEGER PRIMARY KEY, o_custkey INTEGER NOT NULL, o_orderstatus VARCHAR NOT NULL, "
               "o_totalprice DECIMAL(12,2) NOT NULL, o_total4 DECIMAL(12,2) NOT NULL, o_shippriority INTEGER NOT NULL, "
               "o_weight DOUBLE, o_orderdate DATE NOT NULL, o_ts TIMESTAMP NOT NULL, o_priority VARCHAR NOT NULL, "
               "o_clerk VARCHAR"),
    "lineitem": ("l_orderkey INTEGER NOT NULL, l_linenumber INTEGER NOT NULL, l_quantity INTEGER NOT NULL, "
                 "l_negqty INTEGER NOT NULL, l_extendedprice DECIMAL(12,2) NOT NULL, l_discount DECIMAL(4,2) NOT NULL, "
                 "l_tax DECIMAL(4,2) NOT NULL, l_delta DOUBLE, l_returnflag VARCHAR NOT NULL, "
                 "l_shipmode VARCHAR NOT NULL, l_shipdate DATE NOT NULL"),
}
UNIT = {"customer": "c_custkey", "orders": "o_custkey"}


def _edge(rng: random.Random, lo, hi, draw):
    """A value in [lo, hi]: exactly a bound one time in ten (clamps must leave bounds alone too)."""
    r = rng.random()
    return lo if r < 0.05 else hi if r < 0.1 else draw()


def _money(rng: random.Random, lo: float, hi: float) -> Decimal:
    return Decimal(rng.randint(round(lo * 100), round(hi * 100))) / 100


def _day(rng: random.Random, lo: dt.date, hi: dt.date) -> dt.date:
    return lo + dt.timedelta(days=rng.randint(0, (hi - lo).days))


def generate(seed: int, customers: int = 240) -> dict[str, list[tuple]]:
    """Rows of every table, a function of (seed, customers) alone."""
    rng = random.Random(seed)
    b = BOUNDS
    region = [(i, name) for i, name in enumerate(REGIONS)]
    nation = [(i, f"NATION_{i:02d}", i % len(REGIONS)) for i in range(NATIONS)]
    customer, orders, lineitem = [], [], []
    okey = 0
    for ck in range(1, customers + 1):
        cb = b["customer"]
        customer.append((
            ck, rng.randrange(NATIONS) if rng.random() < 0.9 else 7, rng.choice(SEGMENTS),
            _edge(rng, Decimal("-999.99"), Decimal("9999.99"), lambda: _money(rng, -999.99, 9999.99)),
            None if rng.random() < 0.1 else _edge(rng, 18, 90, lambda: rng.randint(18, 90)),
            _edge(rng, -5.0, 5.0, lambda: round(rng.uniform(-5, 5), 3)),
            _edge(rng, *cb["c_since"], lambda: _day(rng, *cb["c_since"]))))
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3, MAX_ORDERS])):
            okey += 1
            ob = b["orders"]
            price = _edge(rng, Decimal(0), Decimal(50000), lambda: _money(rng, 0, 50000))
            odate = _edge(rng, *ob["o_orderdate"], lambda: _day(rng, *ob["o_orderdate"]))
            ts = dt.datetime.combine(odate, dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60)))
            orders.append((
                okey, ck, rng.choice(STATUSES), price, price * 4, _edge(rng, 0, 9, lambda: rng.randint(0, 9)),
                None if rng.random() < 0.1 else _edge(rng, 0.5, 20.25, lambda: rng.randint(2, 81) / 4),
                odate, ts, rng.choice(PRIORITIES), None if rng.random() < 0.15 else rng.choice(CLERKS)))
            lb = b["lineitem"]
            for ln in range(1, rng.randint(1, MAX_LINES) + 1):
                qty = _edge(rng, 1, 50, lambda: rng.randint(1, 50))
                lineitem.append((
                    okey, ln, qty, -qty, _edge(rng, Decimal(0), Decimal(100000), lambda: _money(rng, 0, 100000)),
                    _edge(rng, Decimal("0.00"), Decimal("0.10"), lambda: Decimal(rng.randint(0, 10)) / 100),
                    _edge(rng, Decimal("0.00"), Decimal("0.08"), lambda: Decimal(rng.randint(0, 8)) / 100),
                    None if rng.random() < 0.1 else _edge(rng, -100.0, 100.0, lambda: round(rng.uniform(-100, 100), 2)),
                    rng.choice(FLAGS), rng.choice(SHIPMODES),
                    _edge(rng, *lb["l_shipdate"], lambda: _day(rng, *lb["l_shipdate"]))))
    return {"region": region, "nation": nation, "customer": customer, "orders": orders, "lineitem": lineitem}


def without_unit(data: dict[str, list[tuple]], unit: int) -> dict[str, list[tuple]]:
    """The neighbouring database: every row of one customer removed (the customer, its orders,
    those orders' lineitems)."""
    gone = {o[0] for o in data["orders"] if o[1] == unit}
    return {**data, "customer": [c for c in data["customer"] if c[0] != unit],
            "orders": [o for o in data["orders"] if o[1] != unit],
            "lineitem": [li for li in data["lineitem"] if li[0] not in gone]}


def rows_per_unit(data: dict[str, list[tuple]]) -> dict[int, int]:
    """Each customer's rows over all tables."""
    counts = {c[0]: 1 for c in data["customer"]}
    owner = {}
    for o in data["orders"]:
        counts[o[1]] += 1
        owner[o[0]] = o[1]
    for li in data["lineitem"]:
        counts[owner[li[0]]] += 1
    return counts


def write_duckdb(path: str | Path, data: dict[str, list[tuple]]) -> str:
    con = duckdb.connect(str(path))
    try:
        for table, ddl in DDL.items():
            con.execute(f"CREATE TABLE {table} ({ddl})")
            rows = data[table]
            for i in range(0, len(rows), 1000):
                con.execute(f"INSERT INTO {table} VALUES " + ", ".join(
                    "(" + ", ".join(map(_literal, r)) + ")" for r in rows[i:i + 1000]))
    finally:
        con.close()
    return str(path)


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return repr(v) if isinstance(v, float) else str(v)


def _num(v):
    return float(v) if isinstance(v, (float, Decimal)) and not float(v).is_integer() else int(v)


def policy(ledger: str, *, budget: float = 1e15) -> dict:
    """The dpsql policy for the schema (a dict in the TOML file's structure)."""
    tables = {}
    limits = {"customer": 1, "orders": MAX_ORDERS, "lineitem": MAX_ORDERS * MAX_LINES}
    for t in ("customer", "orders", "lineitem"):
        cols = {}
        for c, (lo, hi) in BOUNDS[t].items():
            cols[c] = ({"lower": lo, "upper": hi} if isinstance(lo, (dt.date, dt.datetime))
                       else {"lower": _num(lo), "upper": _num(hi)})
        for c, values in DOMAINS[t].items():
            cols[c] = {"values": list(values)}
        if t == "orders":
            cols["o_clerk"] = {}
            cols["o_orderkey"] = {}
        tables[t] = {"max_rows_per_unit": limits[t], "max_groups_per_unit": limits[t], "columns": cols}
        if t in UNIT:
            tables[t]["privacy_unit"] = UNIT[t]
        else:
            tables[t]["link"] = "l_orderkey -> orders.o_orderkey"
    return {"budget": {"epsilon": budget, "delta": 1e-3, "ledger": ledger, "accountant": "basic"},
            "defaults": {"epsilon": 1.0, "mechanism": "laplace", "delta": 1e-8},
            "tables": tables, "public": {"tables": ["nation", "region"]},
            "reconstruction": {"cache_lifetime": 0}, "timing": {"quantum": 0, "floor": 0}}
