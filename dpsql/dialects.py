"""What differs between engines, as data: one EngineDialect per sqlglot dialect dpsql generates.

The analysis and the rewrite ask these capabilities instead of testing the dialect's name, so a
new engine is one entry here (and an engine module), not `if dialect == ...` branches in the
privacy code. Each entry's choices carry the argument that makes them safe on that engine.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp


def _duckdb_hash(values: list[exp.Expression], salt: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="hash", expressions=[*values, salt])


def _postgres_hash(values: list[exp.Expression], salt: exp.Expression) -> exp.Expression:
    # The row's text form, e.g. (17,CA,): one text per (unit, keys), NULL keys distinct from ''
    # (concat_ws would skip NULLs and join ('a', NULL) with (NULL, 'a')).
    text = exp.Cast(this=exp.Anonymous(this="ROW", expressions=values), to=exp.DataType.build("TEXT"))
    return exp.Anonymous(this="hashtextextended", expressions=[text, salt])


def _spark_hash(values: list[exp.Expression], salt: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="xxhash64", expressions=[*values, salt])


@dataclass(frozen=True)
class EngineDialect:
    """One engine's capabilities.

    name: the sqlglot dialect.
    salted_hash: (values, salt) -> a 64-bit hash of the values and the per-query salt, total on
        every value (the group choice orders by it).
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
        extreme values west of UTC; dpsql.analysis.predicates.literal_sql).
    linear_like: LIKE/ILIKE go out as an RLIKE that cannot backtrack (Spark matches LIKE with a
        backtracking regex: n^k time on a row of n characters for k %s; dpsql.rewrite.like).
    narrow_sums: sums are computed in BIGINT wherever the bounds prove they fit, and only the
        engine's SUM widens them (PostgreSQL: SUM(int8) accumulates in 128-bit integers, where its
        NUMERIC arithmetic and NUMERIC sums are several times slower; dpsql.rewrite.aggregates).
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
    real: the type fractional row expressions are computed in (dpsql.analysis.expressions), one in
        which arithmetic on values within the declared bounds cannot fail: DOUBLE on DuckDB and
        Spark (IEEE: no error on any result); NUMERIC on PostgreSQL, whose float8 raises on
        underflow ("value out of range: underflow": a tiny value times 0.5) and whose cast of a
        tiny NUMERIC to float8 raises too, where NUMERIC arithmetic is exact and every clamped
        float8 converts to it.
    wall_clock_timestamps: a column the schema reports as TIMESTAMP holds wall-clock times with no
        zone, so its clamp to declared bounds, date_trunc and EXTRACT are the same whatever the
        session's time zone (DuckDB and PostgreSQL report a zoned type as TIMESTAMP WITH TIME ZONE,
        refused by dpsql.analysis.predicates.zoned). Spark reports its session-zoned TIMESTAMP and
        TIMESTAMP_NTZ alike: date functions of TIMESTAMP columns are refused there.
    """
    name: str
    salted_hash: Callable[[list[exp.Expression], exp.Expression], exp.Expression]
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

    def wide(self, value: int) -> exp.Expression:
        """An integer literal in the engine's widest exact integer type."""
        return exp.Cast(this=exp.Literal.number(value), to=exp.DataType.build(self.wide_int, dialect=self.name))


DIALECTS: dict[str, EngineDialect] = {
    "duckdb": EngineDialect("duckdb", _duckdb_hash, "arg_min", False, "HUGEINT", False, False, "DOUBLE",
                            False, False, True, path_catalog="dpsql_files"),
    "postgres": EngineDialect("postgres", _postgres_hash, None, True, "NUMERIC", False, False, "NUMERIC",
                              True, True, False, real="NUMERIC", narrow_sums=True,
                              having_to_where=True, sorted_per_unit=True),
    "spark": EngineDialect("spark", _spark_hash, "min_by", False, "DECIMAL(38, 0)", True, True, "DOUBLE",
                           False, False, True, ntz_timestamp_literals=True, linear_like=True,
                           wall_clock_timestamps=False),
}


def dialect(name: str) -> EngineDialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"no engine dialect {name!r}") from None
