"""What differs between engines, as data: one EngineDialect per sqlglot dialect dpsql generates.

The analysis and the rewrite ask these capabilities instead of testing the dialect's name, so a
new engine is one entry here (and an engine module), not `if dialect == ...` branches in the
privacy code. Each entry's choices carry the argument that makes them safe on that engine.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError


def data_type(name: str, dialect: str | None = None) -> exp.DataType:
    """exp.DataType.build(name, dialect=dialect), the same tree, without parsing the name again:
    sqlglot parses a type name on every build, so the first build of each (name, dialect) is kept
    and every call returns a fresh copy of it (the caller may attach or change it). An unreadable
    name raises as build raises (a failed build is not kept)."""
    if not isinstance(name, str):
        return exp.DataType.build(name, dialect=dialect)
    return _built_type(name, dialect).copy()


@lru_cache(maxsize=256)
def _built_type(name: str, dialect: str | None) -> exp.DataType:
    return exp.DataType.build(name, dialect=dialect)


def read_type(name: str) -> exp.DataType | None:
    """An engine's type name as sqlglot reads it, or None where sqlglot cannot read it. Read in
    DuckDB's dialect, which reads the names all three engines report alike: DuckDB's own (UBIGINT,
    HUGEINT, TIMESTAMP_NS), PostgreSQL's format_type (character varying(10), int8, timestamp with
    time zone, numeric(12,2)) and the names dpsql gives Spark's types (dpsql.engines.spark); the
    default dialect would read PostgreSQL's int8 as an 8-bit integer."""
    try:
        return exp.DataType.build(name, dialect="duckdb")
    except (SqlglotError, ValueError):
        return None


def _duckdb_hash(values: list[exp.Expression], types: list[str] | None, salt: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="hash", expressions=[*values, salt])


# PostgreSQL types whose values hash_record_extended hashes without error, whatever the value:
# each has an extended hash function that is total (NaN, infinities, -0.0 and 0.0, any text), and
# none is collatable. Names as format_type and dpsql's own expressions spell them. A name not
# listed (a domain, an enum, an array, json, ...) takes the text form below.
# These stay name patterns, not read_type: the choice of a hash function is a claim about the
# value's PostgreSQL type, and only format_type's exact spellings make it. sqlglot reads more
# spellings as the same types (DOUBLE and FLOAT as double precision, for one), among them
# names dpsql gives columns whose PostgreSQL type it does not know for certain (a per-unit
# average is "DOUBLE"), which must keep the text form that is total on every type.
_PG_HASHABLE = re.compile(r"smallint|integer|bigint|int|int[248]|boolean|bool|real|double precision|float[48]"
                          r"|(numeric|decimal)(\(\d+(,\s*-?\d+)?\))?|date|uuid"
                          r"|timestamp(\(\d\))?( without time zone)?")
# Collatable: hashed under the C collation, a deterministic one (bytes), named explicitly so that
# no implicit collation conflict can leave the hash without one (an error at the first row).
_PG_TEXT = re.compile(r"text|(character varying|varchar|character|char|bpchar)(\(\d+\))?")


def pg_hash_kind(sql_type: str) -> str | None:
    """"plain" or "text" when hash_record_extended hashes every value of the type (text: under the
    C collation); None otherwise."""
    t = " ".join(sql_type.lower().split())
    if _PG_HASHABLE.fullmatch(t):
        return "plain"
    if _PG_TEXT.fullmatch(t):
        return "text"
    return None


_PG_INT = re.compile(r"smallint|integer|bigint|int|int[248]")
_PG_DIRECT = ((re.compile(r"double precision|float8"), "hashfloat8extended"),
              (re.compile(r"real|float4"), "hashfloat4extended"),
              (re.compile(r"(numeric|decimal)(\(\d+(,\s*-?\d+)?\))?"), "hash_numeric_extended"),
              (re.compile(r"uuid"), "uuid_hash_extended"),
              (re.compile(r"timestamp(\(\d\))?( without time zone)?"), "timestamp_hash_extended"))


def _pg_direct(value: exp.Expression, sql_type: str, seed: exp.Expression) -> exp.Expression | None:
    """The type's own extended hash function of one value, seeded; None when dpsql has none for the
    type. Each is total (NaN, infinities, any text); NULL gives NULL."""
    t = " ".join(sql_type.lower().split())
    fn = arg = None
    if _PG_INT.fullmatch(t):
        fn, arg = "hashint8extended", exp.Cast(this=value, to=exp.DataType.build("BIGINT"))    # widening
    elif _PG_TEXT.fullmatch(t):
        fn, arg = "hashtextextended", _collate_c(value)
    elif t in ("boolean", "bool"):
        fn, arg = "hashint4extended", exp.Cast(this=value, to=exp.DataType.build("INT"))
    else:
        fn = next((name for pattern, name in _PG_DIRECT if pattern.fullmatch(t)), None)
        arg = value
    return None if fn is None else exp.Anonymous(this=fn, expressions=[arg, seed])


def _collate_c(value: exp.Expression) -> exp.Expression:
    return exp.Collate(this=value, expression=exp.Column(this=exp.Identifier(this="C", quoted=True),
                                                         table=exp.Identifier(this="pg_catalog")))


def _postgres_hash(values: list[exp.Expression], types: list[str] | None, salt: exp.Expression) -> exp.Expression:
    kinds = [pg_hash_kind(t) for t in types] if types is not None and len(types) == len(values) else [None]
    if None in kinds:
        # The row's text form, e.g. (17,CA,): one text per (unit, keys), NULL keys distinct from ''
        # (concat_ws would skip NULLs and join ('a', NULL) with (NULL, 'a')). Total on every type.
        text = exp.Cast(this=exp.Anonymous(this="ROW", expressions=values), to=exp.DataType.build("TEXT"))
        return exp.Anonymous(this="hashtextextended", expressions=[text, salt])
    assert types is not None
    # One value (a unit alone), or a unit and one value: the types' own hash functions, 4-5x cheaper
    # than the row's text. The unit's values seed the other's hash (an integer unit XOR the salt:
    # distinct units, distinct seeds), so each unit orders its values by a hash function of its own
    # and no two units' choices are alike. A NULL value hashes as the seed hashed once more.
    if len(values) == 1:
        one = _pg_direct(values[0], types[0], salt)
        if one is not None:
            return one
    elif len(values) == 2:
        if _PG_INT.fullmatch(" ".join(types[0].lower().split())):
            seed = exp.BitwiseXor(this=exp.Cast(this=values[0], to=exp.DataType.build("BIGINT")), expression=salt)
        else:
            seed = _pg_direct(values[0], types[0], salt)
        two = None if seed is None else _pg_direct(values[1], types[1], seed)
        if two is not None:
            return exp.Coalesce(this=two, expressions=[
                exp.Anonymous(this="hashint8extended", expressions=[seed.copy(), exp.Literal.number(0)])])
    # Otherwise the record's fields, each hashed by its type's function, seeded with the salt.
    # hash_record_extended sums them (x31 each step), so alone it would order one unit's groups by
    # the same hashes, rotated by the unit's term, in every unit: units' choices would be
    # correlated (tests/integration/test_bounding.py). Hashing the sum again with the salt makes
    # each (unit, key) its own draw. 1.5x cheaper than the text.
    fields = [_collate_c(v) if k == "text" else v for v, k in zip(values, kinds)]
    record = exp.Anonymous(this="hash_record_extended", expressions=[exp.Anonymous(this="ROW", expressions=fields), salt])
    return exp.Anonymous(this="hashint8extended", expressions=[record, salt.copy()])


def _spark_hash(values: list[exp.Expression], types: list[str] | None, salt: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="xxhash64", expressions=[*values, salt])


def _group_concat(item: exp.Expression) -> exp.Expression:
    return exp.GroupConcat(this=item, separator=exp.Literal.string(","))


def _collect_list(item: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string(","),
                                                       exp.Anonymous(this="collect_list", expressions=[item])])


@dataclass(frozen=True)
class EngineDialect:
    """One engine's capabilities.

    name: the sqlglot dialect.
    salted_hash: (values, types, salt) -> a 64-bit hash of the values and the per-query salt, total
        on every value (the group choice orders by it). types: the values' SQL types where known
        (PostgreSQL hashes the fields of a record when every type allows it, else the record's text).
    arg_min: the aggregate returning the first argument at the second's minimum, or None.
    distinct_on: DISTINCT ON (unit) ... ORDER BY is available (PostgreSQL's one-sort group choice).
    wide_int: the widest exact integer type, for sums across units: DuckDB's HUGEINT, PostgreSQL's
        NUMERIC; Spark's DECIMAL(38, 0), because a BIGINT sum wraps around on overflow there.
    cast_sum: clamped per-unit values must be cast to wide_int before the outer SUM (Spark).
    round_before_bigint: CAST(double AS BIGINT) truncates, so ROUND first (Spark); DuckDB's CAST
        rounds half away from zero, PostgreSQL's rounds half to even: either keeps the clamp exact.
    numeric_compare: the type two different numeric columns are both cast to for a comparison,
        one every value of every numeric type converts to without error: DOUBLE on DuckDB and Spark
        (HUGEINT, UBIGINT and DECIMAL(38) are far below DOUBLE's range); NUMERIC on PostgreSQL,
        whose NUMERIC holds values beyond DOUBLE's range (1e400::float8 raises) while every integer
        and float8 value (NaN, Infinity) converts to NUMERIC.
    exact_literals: numeric literals stay NUMERIC (PostgreSQL compares integers and NUMERIC
        exactly and converts the constant for float columns); elsewhere a non-integer literal, or
        one compared with a non-integer column, is sent as a DOUBLE so the engine converts the
        column to DOUBLE (total there) and not to a DECIMAL that could overflow on some rows.
    fence_rows: the per-row clamp-scale-cast is computed once in a subquery the planner must not
        inline (OFFSET 0): PostgreSQL does not share common subexpressions, so the integer clamp
        around it would compute it three times (10-30% at 1M people). Only where something reads it
        more than once (dpsql.rewrite.rows): without the fence the visits query at 1M people runs
        in two thirds of the time (a sorted parallel aggregation instead of a spilling hash).
    path_sources: a policy source that names files is read as one quoted identifier (Spark's
        registered view of the Parquet files; on DuckDB the table the engine loaded the files
        into, in the catalog path_catalog).
    path_catalog: the catalog (schema main) holding the tables loaded from path sources (DuckDB).
    ntz_timestamp_literals: TIMESTAMP literals go out as TIMESTAMP_NTZ (Spark: a TIMESTAMP literal
        meeting an NTZ column converts every row in the session's time zone, which overflows on
        extreme values west of UTC; dpsql.analysis.literals.literal_sql).
    linear_like: LIKE/ILIKE go out as an RLIKE that cannot backtrack (Spark matches LIKE with a
        backtracking regex: n^k time on a row of n characters for k %s; dpsql.rewrite.like).
    narrow_sums: sums are computed in BIGINT wherever the bounds prove they fit, and only the
        engine's SUM widens them (PostgreSQL: SUM(int8) accumulates in 128-bit integers, where its
        NUMERIC arithmetic and NUMERIC sums are several times slower; dpsql.analysis.measures).
    having_to_where: the planner moves a HAVING condition that holds no aggregate into WHERE, even a
        CASE (PostgreSQL), so a group-level filter meant for groups runs on every row; the primary-key
        shortcut's domain filter then also says COUNT(*) > 0 (true of every group) to stay a group
        filter (dpsql.rewrite.unique_unit).
    sorted_per_unit: the per-unit rows are asked for in unit order (ORDER BY _u in the subquery the
        totals read; PostgreSQL). The planner then produces them by the cheaper of a Sort and a
        GroupAggregate (streaming, as many units as there are) and a HashAggregate with a sort of
        its output (few units): with one unit per ~person it otherwise picks a HashAggregate that
        spills to disk in dozens of batches at the default work_mem (Q3, Q4 at 1M people: 755 and
        824 ms as a spilling hash, 561 and 632 ms sorted). Only without a group choice, whose window
        sorts by unit anyway. The order is the planner's business alone: nothing reads it.
    real: the type fractional row expressions are computed in (dpsql.analysis.arithmetic), one in
        which arithmetic on values within the declared bounds cannot fail: DOUBLE on DuckDB and
        Spark (IEEE: no error on any result); NUMERIC on PostgreSQL, whose float8 raises on
        underflow ("value out of range: underflow": a tiny value times 0.5) and whose cast of a
        tiny NUMERIC to float8 raises too, where NUMERIC arithmetic is exact and every clamped
        float8 converts to it.
    wall_clock_timestamps: a column the schema reports as TIMESTAMP holds wall-clock times with no
        zone, so its clamp to declared bounds, date_trunc and EXTRACT are the same whatever the
        session's time zone (DuckDB and PostgreSQL report a zoned type as TIMESTAMP WITH TIME ZONE,
        refused by dpsql.analysis.sqltypes.zoned). Spark reports its session-zoned TIMESTAMP and
        TIMESTAMP_NTZ alike: date functions of TIMESTAMP columns are refused there.
    timestamp_pairs: two TIMESTAMP columns may be compared (Spark: no, one of them may be a
        TIMESTAMP_NTZ that the engine reports alike and converts to TIMESTAMP in the session's time
        zone, row by row, which overflows west of UTC; dpsql.analysis.predicates.column_pair_cast).
    dow_field, isodow_field, dow_first: the EXTRACT fields of the day of the week (Sunday first) and
        the ISO day of the week, and the number the engine gives Sunday in the first: PostgreSQL's
        and DuckDB's DOW count 0-6, Spark's DAYOFWEEK 1-7 (dpsql.analysis.dates shifts it to 0-6).
    split_group_choice: the group choice ranks only the groups of units with more than L0 of them,
        in a query that reads the per-unit rows as a CTE three times (dpsql.rewrite.group_choice):
        DuckDB and PostgreSQL compute such a CTE once; Spark inlines it, so there it would be
        computed three times and one window over every unit's groups is cheaper.
    split_min_l0: the least L0 at which the split is used. PostgreSQL: 16. With a small L0 many
        units exceed it, so the ranked branch is large anyway, and the CTE's extra hash
        aggregation over every (unit, group) spills at the default work_mem: the field
        benchmark's Q5 (L0 1) and Q6 (L0 2) at 1M people took 1,755 -> 2,475 ms and
        2,242 -> 2,895 ms split, while TPC-H Q7 (L0 168) took 1,860 -> 1,329 ms. DuckDB gains at
        every L0 (field Q5 237 -> 191 ms). A rule of the query and the policy, never of the data.
    row_fence: how the analyst's WHERE becomes a row filter under the policy's [timing] where =
        "rows" (dpsql.rewrite.rows.fenced): "volatile" (DuckDB: a CASE on random(), which the
        optimizer neither pushes into a scan nor folds), "offset" (PostgreSQL: the rows in a
        subquery with OFFSET 0, filtered outside it), None (Spark: the default placement stays).
    concat_texts: the aggregate joining a group's texts with commas (the quantile histograms,
        dpsql.rewrite.quantiles): GROUP_CONCAT as sqlglot writes it per engine; Spark's
        concat_ws over collect_list.
    """
    name: str
    salted_hash: Callable[[list[exp.Expression], list[str] | None, exp.Expression], exp.Expression]
    arg_min: str | None
    distinct_on: bool
    wide_int: str
    cast_sum: bool
    round_before_bigint: bool
    numeric_compare: str
    exact_literals: bool
    fence_rows: bool
    path_sources: bool
    ntz_timestamp_literals: bool = False
    linear_like: bool = False
    real: str = "DOUBLE"
    path_catalog: str | None = None
    narrow_sums: bool = False
    having_to_where: bool = False
    wall_clock_timestamps: bool = True
    sorted_per_unit: bool = False
    timestamp_pairs: bool = True
    dow_field: str = "DOW"
    isodow_field: str = "ISODOW"
    dow_first: int = 0
    concat_texts: Callable[[exp.Expression], exp.Expression] = _group_concat
    split_group_choice: bool = True
    split_min_l0: int = 1
    row_fence: str | None = "volatile"

    def wide(self, value: int) -> exp.Expression:
        """An integer literal in the engine's widest exact integer type."""
        return exp.Cast(this=exp.Literal.number(value), to=data_type(self.wide_int, self.name))


DIALECTS: dict[str, EngineDialect] = {
    "duckdb": EngineDialect("duckdb", _duckdb_hash, "arg_min", False, "HUGEINT", False, False, "DOUBLE",
                            False, False, True, path_catalog="dpsql_files"),
    "postgres": EngineDialect("postgres", _postgres_hash, None, True, "NUMERIC", False, False, "NUMERIC",
                              True, True, False, real="NUMERIC", narrow_sums=True,
                              having_to_where=True, sorted_per_unit=True, row_fence="offset",
                              split_min_l0=16),
    "spark": EngineDialect("spark", _spark_hash, "min_by", False, "DECIMAL(38, 0)", True, True, "DOUBLE",
                           False, False, True, ntz_timestamp_literals=True, linear_like=True,
                           wall_clock_timestamps=False, timestamp_pairs=False, dow_field="DAYOFWEEK",
                           isodow_field="DAYOFWEEK_ISO", dow_first=1, concat_texts=_collect_list,
                           split_group_choice=False, row_fence=None),
}


def dialect(name: str) -> EngineDialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"no engine dialect {name!r}") from None
