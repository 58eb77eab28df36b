"""Per-unit subqueries in FROM (`SELECT unit, agg(col) ... GROUP BY unit`), and the exact per-row
bounds and integer scale every bounded sum is computed at (exact_bounds, cast_in_bounds).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.analysis.predicates import Predicates
from dpsql.analysis.relation import PER_UNIT_HITS, ColumnInfo, Instance, PerUnit, PerUnitAggregate, Relation
from dpsql.analysis.scope import resolve_in
from dpsql.analysis.semijoin import SemiJoins
from dpsql.analysis.sql import and_all
from dpsql.analysis.sqltypes import NUMERIC, family, tracking
from dpsql.errors import QueryRejected

if TYPE_CHECKING:
    from dpsql.analysis.bind import Catalog

PER_UNIT_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


def exact_bounds(lo: Fraction, hi: Fraction, sql_type: str, whole: bool) -> tuple[Fraction, Fraction, int]:
    """Per-row clamp bounds and the integer scale the engine sums at.

    Integer columns with whole bounds sum as themselves (scale 1). Anything else is clamped in
    its own type, multiplied by scale = 10^s and cast to BIGINT (rounding), then clamped again to
    the bounds rounded outward to that grid: the cast of a large double need not round exactly,
    the second clamp makes the bounds hold whatever it does (for DOUBLE inputs with bounds * scale
    within 2^50 it provably holds without it, and the rewrite leaves it out: cast_in_bounds). Those
    outward bounds are what the sensitivity uses. |bound| * scale stays below 10^17, so the cast
    cannot overflow.
    """
    if family(sql_type) == "int" and whole:
        return lo, hi, 1
    digits = len(str(int(max(abs(lo), abs(hi))))) + 1
    scale = 10 ** max(0, min(6, 17 - digits))
    return Fraction(math.floor(lo * scale), scale), Fraction(math.ceil(hi * scale), scale), scale


#: Types whose clamp-scale-round (dpsql.rewrite.clip.scaled_cast) provably lands in the integer
#: bounds: IEEE binary64 (every engine's DOUBLE), and PostgreSQL's unconstrained NUMERIC (the `real`
#: type fractional expressions are computed in there), whose arithmetic is exact.
CAST_IN_BOUNDS_TYPES = frozenset({"double", "double precision", "float8", "float64", "numeric"})
CAST_IN_BOUNDS_LIMIT = 2 ** 50


def cast_in_bounds(sql_type: str, lo: Fraction, hi: Fraction, scale: int) -> bool:
    """Whether CAST(clamp(x, lo, hi) * scale AS BIGINT) is always in [lo*scale, hi*scale], so the
    second (integer) clamp of exact_bounds can be left out.

    lo and hi are on the 10^-s grid (exact_bounds), so L = lo*scale and H = hi*scale are integers;
    require |L|, |H| <= 2^50 and scale = 10^s <= 10^22 (exactly representable in binary64).

    binary64 (round to nearest): the clamp compares in the column's type and returns x itself, or
    the bound literal converted to it, fl(hi) or fl(lo) (a NULL stays NULL; NaN compares above
    every number on DuckDB, PostgreSQL and Spark, so it becomes fl(hi); +-Infinity become the
    bounds). So v = clamp(x) satisfies fl(lo) <= v <= fl(hi). The product fl(v * scale) is
    monotone in v (a correctly rounded multiplication by a positive constant), so it lies between
    fl(fl(lo) * scale) and fl(fl(hi) * scale). Now |fl(hi) - hi| <= |hi| * 2^-53, so
    |fl(hi) * scale - H| <= |H| * 2^-53 <= 1/8, and rounding that product moves it by at most half
    an ulp at magnitude <= 2^50 + 1/8, i.e. 1/8 (2^51 would make it 1/4). So fl(fl(hi) * scale) is
    within 1/4 of H, and likewise for L. The final rounding to an integer (DuckDB's CAST rounds
    half away from zero, PostgreSQL's half to even, Spark's ROUND half up; each is monotone and
    maps every number within 1/4 of an integer to that integer) therefore gives a result in
    [L, H]. NUMERIC (PostgreSQL): the clamp, the product and the bounds are exact, and L, H are
    integers, so the cast returns an integer in [L, H] outright.

    Other types keep both clamps: FLOAT/REAL (binary32: fl32(hi) * 10^6 can be thousands of units
    above H), DECIMAL columns (DuckDB may compare and scale them through DOUBLE of a scaled
    integer beyond 2^53), integers with fractional bounds. tests/rewrite/test_cast_in_bounds.py
    checks the argument numerically and on the engines."""
    return (sql_type.strip().lower() in CAST_IN_BOUNDS_TYPES and 1 < scale <= 10 ** 22
            and max(abs(lo * scale), abs(hi * scale)) <= CAST_IN_BOUNDS_LIMIT
            and (lo * scale).denominator == 1 and (hi * scale).denominator == 1)



def per_unit_instance(body: exp.Select, alias: str, cat: Catalog) -> Instance:
    """`SELECT unit [AS u], agg(col) AS name, ... FROM relation [WHERE p] GROUP BY unit`.

    Each unit's rows in the inner relation are at most R = max rows x max groups (the limits of
    every query on that relation), so each aggregate gets bounds from the limits and the
    declared bounds: COUNT in [0, R]; SUM in [min(0, R lo), max(0, R hi)] (exact, on the scale
    grid); AVG, MIN and MAX of values clamped to [lo, hi] in [lo, hi]. The rewrite clamps every
    value to these bounds, so they hold whatever the data (dpsql.rewrite.relation). The result
    has one row per unit: a relation whose unit is unique."""
    for key, what in (("having", "HAVING"), ("distinct", "DISTINCT"), ("order", "ORDER BY"),
                      ("limit", "LIMIT"), ("offset", "OFFSET")):
        if body.args.get(key):
            raise QueryRejected(f"{what} in a per-unit subquery", "an inner aggregate query may only group by "
                                "the privacy unit")
    extra: list[exp.Expression] = []
    rel = cat.bind(body, where_conjuncts=extra)
    if rel.unit is None:
        raise QueryRejected("an aggregate subquery over public tables", "it is not supported yet")
    _grouped_by_unit(body, rel)
    pred, rel = _where(body, rel, cat, extra)
    R = rel.rows_per_unit * rel.groups_per_unit
    unit_name = None
    aggs: list[PerUnitAggregate] = []
    columns: dict[str, ColumnInfo] = {}
    for item in body.expressions:
        name = item.alias_or_name.lower()
        if name == PER_UNIT_HITS:
            raise QueryRejected(f"the name {name!r}", "dpsql uses it itself", "choose another alias")
        if name in columns:       # the outer query could not tell them apart (PostgreSQL: ambiguous)
            raise QueryRejected(f"two columns named {name!r} in a per-unit subquery",
                                "each item needs its own name", "give each a distinct alias with AS")
        node = item.unalias() if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Column):
            columns[name] = _unit_column(name, node, rel)
            unit_name = name
            continue
        agg, columns[name] = _aggregate(name, node, rel, R)
        aggs.append(agg)
    if unit_name is None:
        raise QueryRejected("a per-unit subquery without its unit", "select the privacy unit it is grouped by, "
                            "so that the outer query can bound each person")
    pu = PerUnit(rel, pred, unit_name, tuple(aggs), R)
    return Instance(alias, "per_unit", "", columns, unit=unit_name, unique=True, not_null=True, rows=1, groups=1,
                    per_unit=pu)


def _grouped_by_unit(body: exp.Select, rel: Relation) -> None:
    group = body.args.get("group")
    if group is None or len(group.expressions) != 1 or not isinstance(group.expressions[0], exp.Column):
        raise QueryRejected("an aggregate subquery in FROM", "an inner query must be grouped by the privacy unit "
                            "alone (one row per person); aggregate the outer query over it")
    gref, _ = resolve_in(list(rel.instances), group.expressions[0])
    if gref not in rel.unit_class:
        raise QueryRejected("an aggregate subquery grouped by another column",
                            "an inner query must be grouped by the privacy unit alone")


def _where(body: exp.Select, rel: Relation, cat: Catalog,
           extra: list[exp.Expression]) -> tuple[exp.Expression | None, Relation]:
    """The subquery's row condition (its WHERE, with semi-joins, and the row flags of what it reads)."""
    where = body.args.get("where")
    pred = None
    if where is not None:
        semis = SemiJoins(rel, cat)
        check = Predicates(tracking(lambda c, w: resolve_in(list(rel.instances), c)), cat.dialect, semis.handle)
        pred = check.check(where.this)
        rel = semis.attach(rel)
    if extra:
        pred = and_all(([pred] if pred is not None else []) + extra)
    return pred, rel


def _unit_column(name: str, node: exp.Column, rel: Relation) -> ColumnInfo:
    ref, info = resolve_in(list(rel.instances), node)
    if ref not in rel.unit_class:
        raise QueryRejected(f"the column {node.name!r} in a per-unit subquery",
                            "only the privacy unit and aggregates can be selected there")
    return ColumnInfo(name, info.sql_type)


def _aggregate(name: str, node: exp.Expression, rel: Relation, R: int) -> tuple[PerUnitAggregate, ColumnInfo]:
    """One aggregate of a per-unit subquery, with its bounds, and the column it makes."""
    if not isinstance(node, PER_UNIT_AGGREGATES):
        raise QueryRejected("this expression in a per-unit subquery",
                            "select the unit and COUNT, SUM, AVG, MIN or MAX of declared columns")
    arg = node.this
    if isinstance(arg, exp.Distinct):
        raise QueryRejected(f"{node.sql_name()}(DISTINCT ...)", "not supported in a per-unit subquery yet")
    if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
        return (PerUnitAggregate(name, "count", None, (Fraction(0), Fraction(R))),
                ColumnInfo(name, "BIGINT", bounds=(Fraction(0), Fraction(R)), integral=True))
    if not isinstance(arg, exp.Column):
        raise QueryRejected(f"{node.sql_name()} of an expression", "aggregate a declared column")
    ref, info = resolve_in(list(rel.instances), arg)
    col_sql = exp.column(ref[1], table=ref[0])
    if isinstance(node, exp.Count):
        if not info.declared and ref not in rel.unit_class:
            raise QueryRejected(f"the column {arg.name!r}", "it is not declared in the policy")
        return (PerUnitAggregate(name, "count", col_sql, (Fraction(0), Fraction(R))),
                ColumnInfo(name, "BIGINT", bounds=(Fraction(0), Fraction(R)), integral=True))
    fname = node.sql_name()
    if not info.bounded or family(info.sql_type) not in NUMERIC:
        raise QueryRejected(f"{fname}({arg.name})", "the column has no declared bounds, so one person's "
                            "influence on the result is unbounded",
                            "ask the data owner to declare lower and upper bounds")
    lo, hi, scale = exact_bounds(*info.range(), info.sql_type, info.whole_bounds)
    if isinstance(node, exp.Sum):
        b = (min(Fraction(0), R * lo), max(Fraction(0), R * hi))
        whole = scale == 1
        return (PerUnitAggregate(name, "sum", col_sql, b, (lo, hi), scale),
                ColumnInfo(name, "BIGINT" if whole else "DOUBLE", bounds=b, integral=whole))
    kind = {exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}[type(node)]
    whole = kind != "avg" and scale == 1
    return (PerUnitAggregate(name, kind, col_sql, (lo, hi), (lo, hi), scale),
            ColumnInfo(name, info.sql_type if kind != "avg" else "DOUBLE", bounds=(lo, hi), integral=whole))
