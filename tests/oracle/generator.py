"""A seeded generator of private queries the oracle schema's policy should accept.

`case(seed)` is a function of the seed alone (random.Random(seed)): the same seed is the same SQL.
Each Case carries the analyst SQL (PostgreSQL-flavoured; it is also the plain query run directly on
the engine, since bounding is a no-op on the oracle data), the SQL counting each group's distinct
units (for partition selection), what each output column is, and the features it uses (its
*shape*). Divisions always have a decimal operand, so PostgreSQL and DuckDB mean the same by them.

Quantiles and MIN/MAX are left out: they are DP estimates whose accuracy is stated in ranks, not
values, so a value oracle cannot judge them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

# Columns by alias: (expression, kind). kinds: n numeric (bounded), nn nullable numeric, k key with a
# public domain, ks key without (partition selection), d date, t timestamp.
COLS = {
    "c": [("c_acctbal", "n"), ("c_age", "nn"), ("c_score", "n"), ("c_mktsegment", "k"), ("c_nationkey", "k"),
          ("c_since", "d")],
    "o": [("o_totalprice", "n"), ("o_shippriority", "n"), ("o_weight", "nn"), ("o_orderstatus", "k"),
          ("o_priority", "k"), ("o_clerk", "ks"), ("o_orderdate", "d"), ("o_ts", "t")],
    "l": [("l_quantity", "n"), ("l_extendedprice", "n"), ("l_discount", "n"), ("l_tax", "n"), ("l_delta", "nn"),
          ("l_linenumber", "n"), ("l_returnflag", "k"), ("l_shipmode", "k"), ("l_shipdate", "d")],
    "n": [("n_name", "k")],
    "r": [("r_name", "k")],
    "pu": [("n_orders", "n"), ("spent", "n")],
}
PREDICATES = {
    "c": ["c.c_age > 40", "c.c_age IS NULL", "c.c_mktsegment IN ('BUILDING', 'MACHINERY')", "c.c_score < 0",
          "c.c_since >= DATE '2019-06-01'", "c.c_acctbal BETWEEN 0 AND 5000", "NOT (c.c_mktsegment = 'AUTOMOBILE')"],
    "o": ["o.o_orderstatus = 'F'", "o.o_shippriority >= 5", "o.o_weight BETWEEN 2 AND 10", "o.o_clerk LIKE 'Clerk#00%'",
          "EXTRACT(year FROM o.o_orderdate) = 2023", "o.o_orderdate < DATE '2022-07-01'",
          "o.o_priority <> '5-LOW' OR o.o_shippriority = 0", "o.o_ts >= TIMESTAMP '2021-03-01 12:00:00'"],
    "l": ["l.l_quantity > 25", "l.l_shipmode IN ('AIR', 'MAIL', 'SHIP')", "l.l_returnflag <> 'R'", "l.l_delta IS NOT NULL",
          "l.l_shipdate BETWEEN DATE '2021-01-01' AND DATE '2023-12-31'", "l.l_linenumber = 1"],
    "n": ["n.n_regionkey IN (1, 3)"],
    "r": ["r.r_name <> 'ASIA'"],
    "pu": ["pu.n_orders >= 2"],
}
UNIT = {"c": "c.c_custkey", "o": "o.o_custkey"}
L_UNITS = " JOIN orders o_u ON l.l_orderkey = o_u.o_orderkey"    # lineitem's unit, for the units query
PER_UNIT = ("(SELECT o_custkey, COUNT(*) AS n_orders, SUM(o_totalprice) AS spent FROM orders "
            "GROUP BY o_custkey) AS pu")


@dataclass(frozen=True)
class Source:
    name: str
    prefix: str          # a WITH clause, or ""
    from_: str
    aliases: tuple[str, ...]
    unit: str            # the unit column, for the units query
    units_from: str      # FROM of the units query ("" = from_)
    where: str = ""      # a semi-join condition every query over this source keeps


SOURCES = [
    Source("customer", "", "customer c", ("c",), UNIT["c"], ""),
    Source("orders", "", "orders o", ("o",), UNIT["o"], ""),
    Source("lineitem", "", "lineitem l", ("l",), "o_u.o_custkey", "lineitem l" + L_UNITS),
    Source("join_unit", "", "customer c JOIN orders o ON o.o_custkey = c.c_custkey", ("c", "o"), UNIT["c"], ""),
    Source("join_1hop", "", "orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey", ("o", "l"), UNIT["o"], ""),
    Source("join_2hop", "", "customer c JOIN orders o ON o.o_custkey = c.c_custkey "
           "JOIN lineitem l ON l.l_orderkey = o.o_orderkey", ("c", "o", "l"), UNIT["c"], ""),
    Source("join_public", "", "customer c JOIN nation n ON c.c_nationkey = n.n_nationkey", ("c", "n"), UNIT["c"], ""),
    Source("join_public2", "", "customer c JOIN nation n ON c.c_nationkey = n.n_nationkey "
           "JOIN region r ON n.n_regionkey = r.r_regionkey", ("c", "n", "r"), UNIT["c"], ""),
    Source("join_unit_public", "", "orders o JOIN customer c ON c.c_custkey = o.o_custkey "
           "JOIN nation n ON c.c_nationkey = n.n_nationkey", ("o", "c", "n"), UNIT["o"], ""),
    Source("cte", "WITH big AS (SELECT o_custkey, o_totalprice, o_shippriority, o_weight, o_orderstatus, o_priority, "
           "o_clerk, o_orderdate, o_ts FROM orders WHERE o_totalprice > 1000) ", "big o", ("o",), UNIT["o"], ""),
    Source("subquery", "", "(SELECT c_custkey, c_acctbal, c_age, c_score, c_mktsegment, c_nationkey, c_since "
           "FROM customer WHERE c_score > -4) AS c", ("c",), UNIT["c"], ""),
    Source("subquery_link", "", "(SELECT l_orderkey, l_quantity, l_extendedprice, l_discount, l_tax, l_delta, "
           "l_linenumber, l_returnflag, l_shipmode, l_shipdate FROM lineitem WHERE l_quantity < 45) AS l", ("l",),
           "o_u.o_custkey", "(SELECT l_orderkey, l_quantity, l_extendedprice, l_discount, l_tax, l_delta, "
           "l_linenumber, l_returnflag, l_shipmode, l_shipdate FROM lineitem WHERE l_quantity < 45) AS l" + L_UNITS),
    Source("semi_in", "", "customer c", ("c",), UNIT["c"], "",
           "c.c_custkey IN (SELECT o_custkey FROM orders WHERE o_orderstatus = 'F')"),
    Source("semi_exists", "", "customer c", ("c",), UNIT["c"], "",
           "EXISTS (SELECT 1 FROM orders o2 WHERE o2.o_custkey = c.c_custkey AND o2.o_shippriority > 4)"),
    Source("semi_not_exists", "", "orders o", ("o",), UNIT["o"], "",
           "NOT EXISTS (SELECT 1 FROM customer c2 WHERE c2.c_custkey = o.o_custkey AND c2.c_score > 2)"),
    Source("per_unit", "", "customer c JOIN " + PER_UNIT + " ON pu.o_custkey = c.c_custkey", ("c", "pu"),
           UNIT["c"], ""),
    # comma joins with the join conditions in WHERE (TPC-H's spelling), and a semi-join through a link key
    Source("comma_2hop", "", "customer c, orders o, lineitem l", ("c", "o", "l"), UNIT["c"], "",
           "o.o_custkey = c.c_custkey AND l.l_orderkey = o.o_orderkey"),
    Source("comma_public", "", "nation n, customer c", ("n", "c"), UNIT["c"], "", "c.c_nationkey = n.n_nationkey"),
    Source("semi_link", "", "orders o", ("o",), UNIT["o"], "",
           "EXISTS (SELECT 1 FROM lineitem l2 WHERE l2.l_orderkey = o.o_orderkey AND l2.l_quantity > 30)"),
]


@dataclass(frozen=True)
class Case:
    seed: int
    sql: str
    units_sql: str | None        # keys..., COUNT(DISTINCT unit) per group of the same rows
    nkeys: int
    kinds: tuple[str, ...]       # per output: key | count | sum | avg | var | distinct | expr
    features: frozenset[str]
    order: tuple[int, bool] | None = None    # (output index, descending)
    limit: int | None = None
    source: str = ""

    @property
    def shape(self) -> frozenset[str]:
        return self.features


def _numeric(rng: random.Random, aliases, feats: set) -> str:
    """A bounded numeric row expression over the source's columns, with the feature it adds."""
    cols = [(f"{a}.{c}", k) for a in aliases for c, k in COLS[a] if k in ("n", "nn")]
    x, kind = rng.choice(cols)
    if kind == "nn" and rng.random() < 0.5:
        feats.add("expr:coalesce")
        x = f"COALESCE({x}, 0)"
    r = rng.random()
    if "l" in aliases and r < 0.12:
        feats.add("expr:paren")
        return rng.choice(["l.l_extendedprice * (1 - l.l_discount)", "l.l_extendedprice * (1 - l.l_discount) * (1 + l.l_tax)",
                           "l.l_quantity * (10 - l.l_linenumber)", "(l.l_quantity + 100) / 100.0", "-(l.l_quantity - l.l_linenumber)"])
    if r < 0.3:
        feats.add("expr:paren")
        k = rng.choice([1, 2, 3, 100])
        return rng.choice([f"({x} + {k}) / 100.0", f"{x} * ({k} - 1)", f"-({x} - {k})", f"({x} - {k}) * 2",
                           f"{k} - ({x} + 1)"])
    if r < 0.4:
        feats.add("expr:case")
        p = rng.choice([p for a in aliases for p in PREDICATES[a]])
        return f"CASE WHEN {p} THEN {x} ELSE 0 END"
    if r < 0.47:
        feats.add("expr:cast")
        return f"CAST({x} AS DOUBLE PRECISION)"
    if r < 0.53:
        feats.add("expr:func")
        # ROUND(x, n) exists for numeric only in PostgreSQL (x may be double precision here)
        return rng.choice([f"ABS({x})", f"ROUND(CAST({x} AS numeric), 1)", f"ROUND(CAST({x} AS numeric))", f"GREATEST({x}, 0)",
                           f"LEAST({x}, 10)"])
    if r < 0.58:
        dates = [f"{a}.{c}" for a in aliases for c, k in COLS[a] if k == "d"]
        if dates:
            feats.add("expr:date")
            return f"EXTRACT({rng.choice(['year', 'month', 'dow'])} FROM {rng.choice(dates)})"
    feats.add("expr:column")
    return x


def _key(rng: random.Random, aliases, feats: set) -> tuple[str, bool]:
    """A GROUP BY key expression and whether it is text typed (for the ORDER BY choice)."""
    r = rng.random()
    cols = [(f"{a}.{c}", k) for a in aliases for c, k in COLS[a]]
    plain = [c for c, k in cols if k in ("k", "ks")]
    if r < 0.45 and plain:
        c = rng.choice(plain)
        feats.add("key:selected" if c.endswith("o_clerk") else "key:public" if c[0] in "nr" else "key:domain")
        return c, True
    nums = [c for c, k in cols if k in ("n", "nn") and not c.startswith("pu.")]
    dates = [c for c, k in cols if k in ("d", "t")]
    if r < 0.7 and dates:
        feats.add("key:date")
        d = rng.choice(dates)
        return rng.choice([f"EXTRACT(year FROM {d})", f"EXTRACT(quarter FROM {d})", f"date_trunc('year', {d})",
                           f"EXTRACT(month FROM {d})"]), False
    if nums:
        feats.add("key:bucket")
        x = rng.choice(nums)
        return rng.choice([f"FLOOR({x} / 10.0)", f"CEIL({x} / 10.0)", f"WIDTH_BUCKET({x}, 0, 100, 5)",
                           f"CASE WHEN {x} > 5 THEN 'hi' ELSE 'lo' END", f"FLOOR({x} / 1000.0)"]), False
    c = rng.choice(plain)
    feats.add("key:domain")
    return c, True


AGGS = ["count_star", "count_col", "sum", "sum", "avg", "var", "distinct"]
VARS = ["VARIANCE", "VAR_POP", "VAR_SAMP", "STDDEV", "STDDEV_POP", "STDDEV_SAMP"]


def _aggregate(rng: random.Random, src: Source, feats: set) -> tuple[str, str]:
    a = rng.choice(AGGS)
    feats.add("agg:" + a)
    if a == "count_star":
        return "COUNT(*)", "count"
    if a == "count_col":
        nullable = [f"{al}.{c}" for al in src.aliases for c, k in COLS[al] if k == "nn" or c == "o_clerk"]
        return f"COUNT({rng.choice(nullable) if nullable else '*'})", "count"
    if a == "distinct":
        if src.name.startswith("lineitem") or src.name == "subquery_link":
            feats.discard("agg:distinct")
            return "COUNT(*)", "count"
        return f"COUNT(DISTINCT {src.unit})", "distinct"
    x = _numeric(rng, src.aliases, feats)
    if a == "sum":
        return f"SUM({x})", "sum"
    if a == "avg":
        return f"AVG({x})", "avg"
    return f"{rng.choice(VARS)}({x})", "var"


def case(seed: int) -> Case:
    """One generated query."""
    rng = random.Random(seed)
    src = rng.choice(SOURCES)
    feats = {"from:" + src.name}
    nkeys = rng.choice([0, 1, 1, 1, 2])
    keys, texty = [], []
    for _ in range(nkeys):
        k, t = _key(rng, src.aliases, feats)
        if k not in keys:
            keys.append(k)
            texty.append(t)
    aggs = [_aggregate(rng, src, feats) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.1:                     # arithmetic on released values
        feats.add("post:arith")
        aggs.append(("COUNT(*) * 2 + 1", "expr"))
    conds = [src.where] if src.where else []
    if rng.random() < 0.55:
        feats.add("where")
        conds.append(rng.choice([p for a in src.aliases for p in PREDICATES[a]]))
    where = (" WHERE " + " AND ".join(f"({c})" for c in conds)) if conds else ""
    items = [f"{k} AS k{i}" for i, k in enumerate(keys)] + [f"{a} AS v{i}" for i, (a, _) in enumerate(aggs)]
    kinds = tuple(["key"] * len(keys) + [kd for _, kd in aggs])
    group = (" GROUP BY " + ", ".join(keys)) if keys else ""
    having = ""
    if keys and rng.random() < 0.2:
        feats.add("having")
        having = f" HAVING COUNT(*) > {rng.randint(0, 6)}.5"
    order = limit = None
    tail = ""
    if keys and rng.random() < 0.3:
        desc = rng.random() < 0.5
        on_value = rng.random() < 0.6
        idx = len(keys) if on_value else 0
        feats.add("order:value" if on_value else "order:key")
        tail = f" ORDER BY {idx + 1}{' DESC' if desc else ''}"
        order = (idx, desc)
        if rng.random() < 0.6:
            feats.add("limit")
            limit = rng.randint(1, 8)
            tail += f" LIMIT {limit}"
    sql = f"{src.prefix}SELECT {', '.join(items)} FROM {src.from_}{where}{group}{having}{tail}"
    units_sql = None
    if keys:
        ukeys = ", ".join(keys)
        units_sql = (f"{src.prefix}SELECT {ukeys}, COUNT(DISTINCT {src.unit}) FROM {src.units_from or src.from_}"
                     f"{where} GROUP BY {ukeys}")
    return Case(seed, sql, units_sql, len(keys), kinds, frozenset(feats), order, limit, src.name)


# -- metamorphic pairs ---------------------------------------------------------------------------

SCALED = [  # (source, column, twin, factor): the twin holds factor * column with bounds times factor
    ("orders", "o.o_totalprice", "o.o_total4", 4),
    ("join_unit", "o.o_totalprice", "o.o_total4", 4),
    ("lineitem", "l.l_quantity", "l.l_negqty", -1),
    ("join_1hop", "l.l_quantity", "l.l_negqty", -1),
]
SPLITS = {"c": "c.c_score > 0", "o": "o.o_orderstatus = 'F'", "l": "l.l_quantity > 25"}


@dataclass(frozen=True)
class Pair:
    """Metamorphic: `whole`'s outputs equal factor x `part`'s (scale), or the sum of `parts`
    (partition: the WHERE split by a condition on a NOT NULL column)."""
    kind: str
    whole: Case
    parts: tuple[Case, ...]
    factor: float = 1.0


def _simple(seed: int, src: Source, key: str | None, aggs: list[tuple[str, str]], where: str, tag: str) -> Case:
    items = ([f"{key} AS k0"] if key else []) + [f"{a} AS v{i}" for i, (a, _) in enumerate(aggs)]
    conds = [c for c in (src.where, where) if c]
    w = (" WHERE " + " AND ".join(f"({c})" for c in conds)) if conds else ""
    sql = f"{src.prefix}SELECT {', '.join(items)} FROM {src.from_}{w}{' GROUP BY ' + key if key else ''}"
    kinds = tuple((["key"] if key else []) + [k for _, k in aggs])
    return Case(seed, sql, None, 1 if key else 0, kinds, frozenset({tag, "from:" + src.name}), source=src.name)


def pair(seed: int) -> Pair:
    rng = random.Random(seed)
    by_name = {s.name: s for s in SOURCES}
    if rng.random() < 0.5:
        name, col, twin, factor = rng.choice(SCALED)
        src = by_name[name]
        keys = [f"{a}.{c}" for a in src.aliases for c, k in COLS[a] if k == "k"]
        key = rng.choice(keys + [None])
        where = rng.choice([""] + [p for a in src.aliases for p in PREDICATES[a]])
        fns = rng.sample(["SUM", "AVG"], rng.randint(1, 2))
        whole = _simple(seed, src, key, [(f"{f}({twin})", f.lower()) for f in fns], where, "meta:scale")
        part = _simple(seed, src, key, [(f"{f}({col})", f.lower()) for f in fns], where, "meta:scale")
        return Pair("scale", whole, (part,), factor)
    src = rng.choice([s for s in SOURCES if s.name in ("customer", "orders", "lineitem", "join_unit", "join_1hop",
                                                        "join_2hop", "semi_in")])
    keys = [f"{a}.{c}" for a in src.aliases for c, k in COLS[a] if k == "k"]
    key = rng.choice(keys + [None])
    feats: set = set()
    aggs = [("COUNT(*)", "count"), (f"SUM({_numeric(rng, src.aliases, feats)})", "sum")]
    where = rng.choice([""] + [p for a in src.aliases for p in PREDICATES[a]])
    split = SPLITS[rng.choice(src.aliases)]
    both = (lambda extra: f"({where}) AND {extra}" if where else extra)
    whole = _simple(seed, src, key, aggs, where, "meta:partition")
    parts = (_simple(seed, src, key, aggs, both(f"({split})"), "meta:partition"),
             _simple(seed, src, key, aggs, both(f"NOT ({split})"), "meta:partition"))
    return Pair("partition", whole, parts)
