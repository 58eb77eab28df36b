"""A seeded, offline TPC-H-shaped database, generated inside DuckDB, and its dpsql policies.

DuckDB's `tpch` extension needs the network to install, so this writes the eight tables of the
TPC-H specification (2.18+) itself: the spec's columns and SQL types (DECIMAL(15,2) money, DATE
columns, CHAR flags), its cardinalities at a scale factor SF (customer 150,000 x SF, orders about
1,500,000 x SF, lineitem about 6,000,000 x SF, part 200,000 x SF, partsupp 4 per part, supplier
10,000 x SF, 25 nations, 5 regions) and, roughly, its value distributions (dbgen's formulas for
p_retailprice, ps_suppkey, l_extendedprice, the date rules for ship/commit/receipt dates, return
flags and line status, o_orderstatus and o_totalprice from the order's lines; the spec's word lists
for p_name, p_type, p_container, segments, priorities, ship modes and instructions; comments are
short word salads that contain the phrases Q13 and Q16 look for).

Every value is a function of (seed, a column tag, the row's key) through DuckDB's hash(): nothing
is generated row by row in Python. One deliberate difference from dbgen, so that a privacy policy's
contribution limits hold on the data (bounding then clips nothing and a correct answer equals the
plain one): each customer with c_custkey % 3 != 0 places between MIN_ORDERS and MAX_ORDERS orders
(uniform; dbgen draws o_custkey uniformly, which has no hard maximum), and each order has 1..7
lines. Customers with c_custkey % 3 == 0 place none, as in the spec. o_orderkey = 32 * c_custkey + k
(sparse, like dbgen's).
"""
from __future__ import annotations

import datetime as _dt
import os
import tempfile
import time
from typing import Any

import duckdb

MIN_ORDERS, MAX_ORDERS = 6, 24          # orders per ordering customer (mean 15, as in dbgen)
MAX_LINES = 7                           # lines per order (1..7, as in dbgen)
START, END = _dt.date(1992, 1, 1), _dt.date(1998, 12, 31)
ORDER_LAST = _dt.date(1998, 8, 2)       # END - 151 days: the last order date
CURRENT = _dt.date(1995, 6, 17)         # the spec's CURRENTDATE (return flags, line status)

REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = [("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4), ("ETHIOPIA", 0),
           ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2), ("IRAN", 4), ("IRAQ", 4),
           ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0), ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1),
           ("CHINA", 2), ("ROMANIA", 3), ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3),
           ("UNITED KINGDOM", 3), ("UNITED STATES", 1)]
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SHIPMODES = ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]
INSTRUCTIONS = ["COLLECT COD", "DELIVER IN PERSON", "NONE", "TAKE BACK RETURN"]
RETURNFLAGS = ["A", "N", "R"]
LINESTATUS = ["F", "O"]
ORDERSTATUS = ["F", "O", "P"]
TYPE1 = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"]
TYPE2 = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"]
TYPE3 = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"]
CONTAINER1 = ["SM", "LG", "MED", "JUMBO", "WRAP"]
CONTAINER2 = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"]
COLORS = ("almond antique aquamarine azure beige bisque black blanched blue blush brown burlywood burnished "
          "chartreuse chiffon chocolate coral cornflower cornsilk cream cyan dark deep dim dodger drab firebrick "
          "floral forest frosted gainsboro ghost goldenrod green grey honeydew hot indian ivory khaki lace "
          "lavender lawn lemon light lime linen magenta maroon medium metallic midnight mint misty moccasin "
          "navajo navy olive orange orchid pale papaya peach peru pink plum powder puff purple red rose rosy "
          "royal saddle salmon sandy seashell sienna sky slate smoke snow spring steel tan thistle tomato "
          "turquoise violet wheat white yellow").split()
WORDS = ("furiously quickly carefully blithely slyly ironic final regular express bold pending special "
         "unusual even silent fluffy requests deposits packages accounts instructions theodolites pinto beans "
         "foxes ideas platelets asymptotes dependencies excuses sleep wake nag haggle use cajole detect "
         "integrate boost").split()

# Bounds that hold on every generated row (checked by check_bounds):
EXTENDEDPRICE = (900, 104950)           # l_quantity (1..50) x p_retailprice (900.00..2099.00)
TOTALPRICE = (800, 800000)              # sum over <= 7 lines of price x (1 + tax) x (1 - discount)


def _lit(xs: list[str]) -> str:
    return "[" + ", ".join("'" + x.replace("'", "''") + "'" for x in xs) + "]"


def _pick(xs: list[str], tag: str, key: str) -> str:
    """One element of xs chosen by u(tag, key)."""
    return f"{_lit(xs)}[1 + CAST(floor(u('{tag}', {key}) * {len(xs)}) AS INTEGER)]"


def _int(lo: int, hi: int, tag: str, key: str) -> str:
    """A whole number uniform in lo..hi."""
    return f"({lo} + CAST(floor(u('{tag}', {key}) * {hi - lo + 1}) AS INTEGER))"


def _cents(lo: float, hi: float, tag: str, key: str) -> str:
    """A DECIMAL(15,2) uniform on the cent grid of [lo, hi]."""
    a, b = round(lo * 100), round(hi * 100)
    return f"CAST(({a} + CAST(floor(u('{tag}', {key}) * {b - a + 1}) AS BIGINT)) / 100.0 AS DECIMAL(15,2))"


def _text(tag: str, key: str, words: int, width: int) -> str:
    parts = " || ' ' || ".join(_pick(WORDS, f"{tag}{i}", key) for i in range(words))
    return f"left({parts}, {width})"


def _phone(nation: str, tag: str, key: str) -> str:
    return (f"CAST({nation} + 10 AS VARCHAR) || '-' || CAST({_int(100, 999, tag + 'a', key)} AS VARCHAR) || '-' || "
            f"CAST({_int(100, 999, tag + 'b', key)} AS VARCHAR) || '-' || CAST({_int(1000, 9999, tag + 'c', key)} AS VARCHAR)")


def _retailprice(p: str) -> str:
    return f"CAST((90000 + (({p} // 10) % 20001) + 100 * ({p} % 1000)) / 100.0 AS DECIMAL(15,2))"


def _supplier(p: str, i: str, s: int) -> str:
    """The i-th (0..3) supplier of part p: dbgen's (p + i * (S/4 + (p-1)/S)) mod S + 1, with the
    step kept below S/3 so the four are distinct at tiny S too (the same as dbgen's from SF 0.01)."""
    span = max(1, (s - 1) // 3 - s // 4 + 1)
    return f"CAST(({p} + {i} * ({s} // 4 + (({p} - 1) // {s}) % {span})) % {s} + 1 AS INTEGER)"


def sizes(sf: float) -> dict[str, int]:
    return {"customer": max(3, round(150_000 * sf)), "part": max(4, round(200_000 * sf)),
            "supplier": max(4, round(10_000 * sf)), "clerks": max(1, round(1_000 * sf))}


def generate(path: str, sf: float, *, seed: int = 0, threads: int | None = None) -> dict[str, Any]:
    """Create the eight tables in a new DuckDB file at `path` (replaced if it exists).
    Returns the row counts and the seconds it took."""
    if os.path.exists(path):
        os.remove(path)
    for extra in (path + ".wal",):
        if os.path.exists(extra):
            os.remove(extra)
    n = sizes(sf)
    C, P, S = n["customer"], n["part"], n["supplier"]
    t0 = time.perf_counter()
    con = duckdb.connect(path)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute(f"CREATE TEMP MACRO u(tag, k) AS CAST(hash(xor(hash({int(seed)}, tag), CAST(k AS UBIGINT))) AS DOUBLE) / 18446744073709551616.0")
    days = (ORDER_LAST - START).days + 1
    stmts = [
        "CREATE TABLE region (r_regionkey INTEGER PRIMARY KEY, r_name CHAR(25) NOT NULL, "
        "r_comment VARCHAR(152))",
        "INSERT INTO region SELECT i, " + _lit(REGIONS) + f"[i + 1], {_text('rc', 'i', 6, 152)} FROM range(5) t(i)",
        "CREATE TABLE nation (n_nationkey INTEGER PRIMARY KEY, n_name CHAR(25) NOT NULL, "
        "n_regionkey INTEGER NOT NULL, n_comment VARCHAR(152))",
        "INSERT INTO nation SELECT i, " + _lit([x for x, _ in NATIONS]) + "[i + 1], "
        + "[" + ", ".join(str(r) for _, r in NATIONS) + f"][i + 1], {_text('nc', 'i', 6, 152)} FROM range(25) t(i)",
        "CREATE TABLE supplier (s_suppkey INTEGER PRIMARY KEY, s_name CHAR(25) NOT NULL, s_address VARCHAR(40) "
        "NOT NULL, s_nationkey INTEGER NOT NULL, s_phone CHAR(15) NOT NULL, s_acctbal DECIMAL(15,2) NOT NULL, "
        "s_comment VARCHAR(101) NOT NULL)",
        # About 5 in 10,000 suppliers have 'Customer ... Complaints' in their comment (Q16), as in dbgen.
        f"INSERT INTO supplier SELECT s, 'Supplier#' || lpad(CAST(s AS VARCHAR), 9, '0'), {_text('sa', 's', 3, 40)}, "
        f"nat, {_phone('nat', 'sp', 's')}, {_cents(-999.99, 9999.99, 'sb', 's')}, "
        f"CASE WHEN u('sx', s) < 0.0005 THEN 'slyly Customer final Complaints' ELSE {_text('sc', 's', 6, 101)} END "
        f"FROM (SELECT s, {_int(0, 24, 'sn', 's')} AS nat FROM range(1, {S + 1}) t(s))",
        "CREATE TABLE part (p_partkey INTEGER PRIMARY KEY, p_name VARCHAR(55) NOT NULL, p_mfgr CHAR(25) NOT NULL, "
        "p_brand CHAR(10) NOT NULL, p_type VARCHAR(25) NOT NULL, p_size INTEGER NOT NULL, p_container CHAR(10) "
        "NOT NULL, p_retailprice DECIMAL(15,2) NOT NULL, p_comment VARCHAR(23) NOT NULL)",
        "INSERT INTO part SELECT p, " + " || ' ' || ".join(_pick(COLORS, f"pn{i}", "p") for i in range(5))
        + ", 'Manufacturer#' || CAST(m AS VARCHAR), 'Brand#' || CAST(m AS VARCHAR) || "
        f"CAST({_int(1, 5, 'pb', 'p')} AS VARCHAR), {_pick(TYPE1, 'pt1', 'p')} || ' ' || {_pick(TYPE2, 'pt2', 'p')} "
        f"|| ' ' || {_pick(TYPE3, 'pt3', 'p')}, {_int(1, 50, 'ps', 'p')}, {_pick(CONTAINER1, 'pc1', 'p')} || ' ' || "
        f"{_pick(CONTAINER2, 'pc2', 'p')}, {_retailprice('p')}, {_text('pk', 'p', 3, 23)} "
        f"FROM (SELECT p, {_int(1, 5, 'pm', 'p')} AS m FROM range(1, {P + 1}) t(p))",
        "CREATE TABLE partsupp (ps_partkey INTEGER NOT NULL, ps_suppkey INTEGER NOT NULL, ps_availqty INTEGER "
        "NOT NULL, ps_supplycost DECIMAL(15,2) NOT NULL, ps_comment VARCHAR(199) NOT NULL, "
        "PRIMARY KEY (ps_partkey, ps_suppkey))",
        f"INSERT INTO partsupp SELECT p, {_supplier('p', 'i', S)}, "
        f"{_int(1, 9999, 'pa', 'p * 4 + i')}, {_cents(1, 1000, 'pcost', 'p * 4 + i')}, "
        f"{_text('pcm', 'p * 4 + i', 8, 199)} FROM range(1, {P + 1}) t(p), range(4) s(i)",
        "CREATE TABLE customer (c_custkey INTEGER PRIMARY KEY, c_name VARCHAR(25) NOT NULL, c_address VARCHAR(40) "
        "NOT NULL, c_nationkey INTEGER NOT NULL, c_phone CHAR(15) NOT NULL, c_acctbal DECIMAL(15,2) NOT NULL, "
        "c_mktsegment CHAR(10) NOT NULL, c_comment VARCHAR(117) NOT NULL)",
        f"INSERT INTO customer SELECT c, 'Customer#' || lpad(CAST(c AS VARCHAR), 9, '0'), {_text('ca', 'c', 3, 40)}, "
        f"nat, {_phone('nat', 'cp', 'c')}, {_cents(-999.99, 9999.99, 'cb', 'c')}, {_pick(SEGMENTS, 'cs', 'c')}, "
        f"{_text('cc', 'c', 8, 117)} FROM (SELECT c, {_int(0, 24, 'cn', 'c')} AS nat FROM range(1, {C + 1}) t(c))",
        # The orders' keys, customers, dates and line counts first; status and total from the lines after.
        "CREATE TEMP TABLE order_base AS SELECT CAST(32 * c + k AS INTEGER) AS o_orderkey, CAST(c AS INTEGER) AS "
        f"o_custkey, DATE '{START}' + CAST(floor(u('od', 32 * c + k) * {days}) AS INTEGER) AS o_orderdate, "
        f"{_int(1, MAX_LINES, 'ol', '32 * c + k')} AS n_lines FROM (SELECT c, unnest(range(n)) AS k FROM "
        f"(SELECT c, {_int(MIN_ORDERS, MAX_ORDERS, 'on', 'c')} AS n FROM range(1, {C + 1}) t(c) WHERE c % 3 <> 0))",
        "CREATE TABLE lineitem (l_orderkey INTEGER NOT NULL, l_partkey INTEGER NOT NULL, l_suppkey INTEGER NOT NULL, "
        "l_linenumber INTEGER NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, "
        "l_discount DECIMAL(15,2) NOT NULL, l_tax DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, "
        "l_linestatus CHAR(1) NOT NULL, l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, "
        "l_receiptdate DATE NOT NULL, l_shipinstruct CHAR(25) NOT NULL, l_shipmode CHAR(10) NOT NULL, "
        "l_comment VARCHAR(44) NOT NULL)",
        f"INSERT INTO lineitem SELECT o, p, {_supplier('p', 'i', S)}, "
        f"ln, q, CAST(q * {_retailprice('p')} AS DECIMAL(15,2)), {_cents(0, 0.10, 'ld', 'k')}, "
        f"{_cents(0, 0.08, 'lt', 'k')}, CASE WHEN rd <= DATE '{CURRENT}' THEN CASE WHEN u('lr', k) < 0.5 THEN 'R' "
        f"ELSE 'A' END ELSE 'N' END, CASE WHEN sd > DATE '{CURRENT}' THEN 'O' ELSE 'F' END, sd, cd, rd, "
        f"{_pick(INSTRUCTIONS, 'li', 'k')}, {_pick(SHIPMODES, 'lm', 'k')}, {_text('lc', 'k', 4, 44)} FROM ("
        f"SELECT o, ln, k, p, i, q, sd, cd, sd + {_int(1, 30, 'lrd', 'k')} AS rd FROM ("
        f"SELECT o, ln, k, {_int(1, P, 'lp', 'k')} AS p, {_int(0, 3, 'ls', 'k')} AS i, "
        f"CAST({_int(1, 50, 'lq', 'k')} AS DECIMAL(15,2)) AS q, od + {_int(1, 121, 'lsd', 'k')} AS sd, "
        f"od + {_int(30, 90, 'lcd', 'k')} AS cd FROM (SELECT o, od, ln, CAST(o AS BIGINT) * 8 + ln AS k FROM "
        "(SELECT o_orderkey AS o, o_orderdate AS od, CAST(unnest(range(1, n_lines + 1)) AS INTEGER) AS ln "
        "FROM order_base))))",
        "CREATE TABLE orders (o_orderkey INTEGER PRIMARY KEY, o_custkey INTEGER NOT NULL, o_orderstatus CHAR(1) "
        "NOT NULL, o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, o_orderpriority CHAR(15) NOT NULL, "
        "o_clerk CHAR(15) NOT NULL, o_shippriority INTEGER NOT NULL, o_comment VARCHAR(79) NOT NULL)",
        f"INSERT INTO orders SELECT b.o_orderkey, o_custkey, CASE WHEN n_f = n_lines THEN 'F' WHEN n_f = 0 THEN 'O' "
        f"ELSE 'P' END, CAST(total AS DECIMAL(15,2)), o_orderdate, {_pick(PRIORITIES, 'op', 'b.o_orderkey')}, "
        f"'Clerk#' || lpad(CAST({_int(1, n['clerks'], 'oc', 'b.o_orderkey')} AS VARCHAR), 9, '0'), 0, "
        # About 1% of the comments have 'special ... requests' (Q13 drops those orders).
        f"CASE WHEN u('osr', b.o_orderkey) < 0.01 THEN 'blithely special pending requests' "
        f"ELSE {_text('ocm', 'b.o_orderkey', 5, 79)} END "
        "FROM order_base b JOIN (SELECT l_orderkey, count(*) FILTER (WHERE l_linestatus = 'F') AS n_f, "
        "sum(l_extendedprice * (1 + l_tax) * (1 - l_discount)) AS total FROM lineitem GROUP BY l_orderkey) l "
        "ON l.l_orderkey = b.o_orderkey ORDER BY b.o_orderkey",
        "DROP TABLE order_base",
    ]
    try:
        for sql in stmts:
            con.execute(sql)
        con.execute("CHECKPOINT")
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("region", "nation", "supplier", "part", "partsupp", "customer", "orders", "lineitem")}
    finally:
        con.close()
    return {"rows": counts, "seconds": time.perf_counter() - t0}


# --- policies --------------------------------------------------------------------------------------

def _dates(lo: _dt.date, hi: _dt.date) -> dict[str, Any]:
    return {"lower": lo, "upper": hi}


def policy(ledger: str, *, budget: float = 1e12, integral: bool = False) -> dict[str, Any]:
    """customer as the privacy unit: orders carry it (o_custkey), lineitem links to its order.
    nation, region, part, supplier and partsupp are public. Limits the generated data respect:
    a customer has at most MAX_ORDERS orders and MAX_ORDERS * MAX_LINES lines; rows in any one
    group and groups are bounded by those counts (so bounding clips nothing).

    integral: the fractional bounds (l_discount [0, 0.10], l_tax [0, 0.08], c_acctbal
    [-999.99, 9999.99]) widened outwards to whole numbers ([0, 1], [0, 1], [-1000, 10000]):
    still true of the data, looser, and clear of the fractional-bound defect."""
    k, kl = MAX_ORDERS, MAX_ORDERS * MAX_LINES
    disc, tax, bal = ((0, 1), (0, 1), (-1000, 10000)) if integral else ((0, 0.10), (0, 0.08), (-999.99, 9999.99))
    return {
        "budget": {"epsilon": budget, "delta": 1e-3, "ledger": ledger, "accountant": "basic"},
        "defaults": {"epsilon": 0.8, "delta": 1e-6, "mechanism": "laplace", "min_epsilon": 0.001},
        "tables": {
            "customer": {
                "privacy_unit": "c_custkey", "max_rows_per_unit": 1, "max_groups_per_unit": 1,
                "columns": {
                    "c_name": {}, "c_address": {}, "c_nationkey": {}, "c_phone": {}, "c_comment": {},
                    "c_acctbal": {"lower": bal[0], "upper": bal[1]},
                    "c_mktsegment": {"values": SEGMENTS},
                },
            },
            "orders": {
                "privacy_unit": "o_custkey", "max_rows_per_unit": k, "max_groups_per_unit": k,
                "columns": {
                    "o_orderkey": {}, "o_clerk": {}, "o_comment": {},
                    "o_orderstatus": {"values": ORDERSTATUS},
                    "o_totalprice": {"lower": TOTALPRICE[0], "upper": TOTALPRICE[1]},
                    "o_orderdate": _dates(START, ORDER_LAST),
                    "o_orderpriority": {"values": PRIORITIES},
                    "o_shippriority": {"values": [0]},
                },
            },
            "lineitem": {
                "link": "l_orderkey -> orders.o_orderkey", "max_rows_per_unit": kl, "max_groups_per_unit": kl,
                "columns": {
                    "l_partkey": {}, "l_suppkey": {}, "l_linenumber": {"lower": 1, "upper": MAX_LINES},
                    "l_quantity": {"lower": 1, "upper": 50},
                    "l_extendedprice": {"lower": EXTENDEDPRICE[0], "upper": EXTENDEDPRICE[1]},
                    "l_discount": {"lower": disc[0], "upper": disc[1]},
                    "l_tax": {"lower": tax[0], "upper": tax[1]},
                    "l_returnflag": {"values": RETURNFLAGS},
                    "l_linestatus": {"values": LINESTATUS},
                    "l_shipdate": _dates(_dt.date(1992, 1, 2), _dt.date(1998, 12, 1)),
                    "l_commitdate": _dates(_dt.date(1992, 1, 31), _dt.date(1998, 10, 31)),
                    "l_receiptdate": _dates(_dt.date(1992, 1, 3), _dt.date(1998, 12, 31)),
                    "l_shipinstruct": {"values": INSTRUCTIONS},
                    "l_shipmode": {"values": SHIPMODES},
                    "l_comment": {},
                },
            },
        },
        "public": {"tables": ["nation", "region", "part", "supplier", "partsupp"]},
        "reconstruction": {"cache_lifetime": 0, "max_subset_queries": 1_000_000},
        "timing": {"quantum": 0, "floor": 0},
        "limits": {"max_released_rows": 100_000},
    }


def supplier_limits(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The most rows one supplier has in partsupp and in lineitem, read from the data (the
    generator assigns parts' suppliers by a hash, so the maxima depend on the scale factor); the
    supplier-unit policy declares them, so that bounding clips nothing."""
    ps = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM partsupp GROUP BY ps_suppkey)").fetchone()[0]
    li = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM lineitem GROUP BY l_suppkey)").fetchone()[0]
    return {"partsupp": int(ps), "lineitem": int(li)}


def supplier_policy(ledger: str, limits: dict[str, int], *, budget: float = 1e12,
                    integral: bool = False) -> dict[str, Any]:
    """supplier as the privacy unit (the second run of issue 30's benchmark): supplier
    (s_suppkey), partsupp (ps_suppkey) and lineitem (l_suppkey) carry it; customer, orders,
    nation, region and part are public. `limits`: supplier_limits() of the data."""
    pol = policy(ledger, budget=budget, integral=integral)
    bal = (-1000, 10000) if integral else (-999.99, 9999.99)
    li = pol["tables"]["lineitem"]
    del li["link"], li["columns"]["l_suppkey"]
    li["columns"]["l_orderkey"] = {}
    li.update(privacy_unit="l_suppkey", max_rows_per_unit=limits["lineitem"],
              max_groups_per_unit=limits["lineitem"])
    pol["tables"] = {
        "supplier": {
            "privacy_unit": "s_suppkey", "max_rows_per_unit": 1, "max_groups_per_unit": 1,
            "columns": {"s_name": {}, "s_address": {}, "s_nationkey": {}, "s_phone": {}, "s_comment": {},
                        "s_acctbal": {"lower": bal[0], "upper": bal[1]}},
        },
        "partsupp": {
            "privacy_unit": "ps_suppkey", "max_rows_per_unit": limits["partsupp"],
            "max_groups_per_unit": limits["partsupp"],
            "columns": {"ps_partkey": {}, "ps_comment": {}, "ps_availqty": {"lower": 1, "upper": 9999},
                        "ps_supplycost": {"lower": 1, "upper": 1000}},
        },
        "lineitem": li,
    }
    pol["public"] = {"tables": ["nation", "region", "part", "customer", "orders"]}
    return pol


def check_bounds(con: duckdb.DuckDBPyConnection, pol: dict[str, Any]) -> list[str]:
    """Every declared bound, value domain and contribution limit of `pol`, checked by SQL on the
    data. Returns the violations (empty when the data satisfy the policy)."""
    bad = []
    for t, tp in pol["tables"].items():
        for c, spec in tp.get("columns", {}).items():
            if "lower" in spec:
                n = con.execute(f"SELECT count(*) FROM {t} WHERE {c} < ? OR {c} > ? OR {c} IS NULL",
                                [spec["lower"], spec["upper"]]).fetchone()[0]
                if n:
                    lo, hi = con.execute(f"SELECT min({c}), max({c}) FROM {t}").fetchone()
                    bad.append(f"{t}.{c}: {n} rows outside [{spec['lower']}, {spec['upper']}] (data {lo}..{hi})")
            if "values" in spec:
                vals = [r[0] for r in con.execute(f"SELECT DISTINCT {c} FROM {t}").fetchall()]
                extra = [v for v in vals if v not in spec["values"]]
                if extra:
                    bad.append(f"{t}.{c}: values {extra[:5]} outside the declared domain")
        unit_sql = _unit_sql(t, tp)
        per_unit = con.execute(f"SELECT max(n) FROM (SELECT count(*) AS n FROM {unit_sql} GROUP BY unit)").fetchone()[0]
        limit = min(tp["max_rows_per_unit"], tp["max_groups_per_unit"]) if tp["max_groups_per_unit"] > 1 \
            else tp["max_rows_per_unit"]
        if per_unit is not None and per_unit > limit:
            bad.append(f"{t}: a unit has {per_unit} rows, more than the limits allow in one group "
                       f"or across groups ({limit})")
    return bad


def _unit_sql(t: str, tp: dict[str, Any]) -> str:
    if "privacy_unit" in tp:
        return f"(SELECT {tp['privacy_unit']} AS unit FROM {t})"
    col, target = tp["link"].split("->")
    ttable, tkey = target.strip().split(".")
    return (f"(SELECT o.o_custkey AS unit FROM {t} x JOIN {ttable} o ON x.{col.strip()} = o.{tkey})")


# --- PostgreSQL ------------------------------------------------------------------------------------

_PG_TYPES = {"INTEGER": "integer", "BIGINT": "bigint", "DATE": "date", "VARCHAR": "varchar"}


def copy_to_postgres(duckdb_path: str, dsn: str) -> float:
    """Copy every table (types, NOT NULL, primary keys) into the PostgreSQL database at `dsn`
    (tables replaced): DuckDB writes CSV, PostgreSQL reads it with COPY. Returns the seconds."""
    import psycopg
    t0 = time.perf_counter()
    src = duckdb.connect(duckdb_path, read_only=True)
    try:
        tables = [r[0] for r in src.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                            "ORDER BY table_name").fetchall()]
        with psycopg.connect(dsn, autocommit=True) as pg, tempfile.TemporaryDirectory() as tmp:
            for t in tables:
                cols = src.execute("SELECT column_name, data_type, is_nullable FROM duckdb_columns() WHERE "
                                   "table_name = ? AND schema_name = 'main' ORDER BY column_index", [t]).fetchall()
                # CHAR(n) reads back as VARCHAR in duckdb_columns; take the declared text from the table's SQL.
                keys = src.execute("SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = ? "
                                   "AND constraint_type = 'PRIMARY KEY'", [t]).fetchall()
                defs = [f"{c} {_PG_TYPES.get(ty, ty.lower())}{'' if nullable else ' NOT NULL'}" for c, ty, nullable in cols]
                defs += [f"PRIMARY KEY ({', '.join(names)})" for (names,) in keys]
                pg.execute(f"DROP TABLE IF EXISTS {t} CASCADE")
                pg.execute(f"CREATE TABLE {t} ({', '.join(defs)})")
                csv = os.path.join(tmp, f"{t}.csv")
                src.execute(f"COPY {t} TO '{csv}' (FORMAT csv, HEADER false)")
                with open(csv, "rb") as f, pg.cursor().copy(f"COPY {t} FROM STDIN (FORMAT csv)") as cp:
                    while chunk := f.read(1 << 20):
                        cp.write(chunk)
                os.remove(csv)
                pg.execute(f"ANALYZE {t}")
    finally:
        src.close()
    return time.perf_counter() - t0
