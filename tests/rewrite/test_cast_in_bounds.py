"""The one-clamp exact sum (dpsql.analysis.per_unit.cast_in_bounds): for DOUBLE (and PostgreSQL
NUMERIC) inputs, CAST(clamp(x, lo, hi) * 10^s AS BIGINT) already lies in [lo*10^s, hi*10^s], so
the per-unit sums leave out the second, integer clamp. Checked three ways: the floating-point
step of the argument in Python's binary64 for many grid bounds up to 2^50; on DuckDB and
PostgreSQL, the rewrite's own expression over adversarial values (NaN, +-Infinity, the largest
doubles, -0.0, NULL, the neighbours of every bound) equals the twice-clamped one and stays in the
bounds; and the analysis marks exactly the types and bounds the argument covers.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import duckdb
import pytest
from sqlglot import exp

from dpsql.analysis.per_unit import CAST_IN_BOUNDS_LIMIT, cast_in_bounds, exact_bounds
from dpsql.dialects import dialect
from dpsql.rewrite.clip import clamp, scaled_cast

SCALE = 10 ** 6


def _grid_bounds(rng: random.Random, n: int) -> list[tuple[Fraction, Fraction]]:
    out = [(Fraction(0), Fraction(500000)), (Fraction(0), Fraction(2000)), (Fraction(-1, 10), Fraction(1, 10)),
           (Fraction(-CAST_IN_BOUNDS_LIMIT, SCALE), Fraction(CAST_IN_BOUNDS_LIMIT, SCALE)),
           (Fraction(-CAST_IN_BOUNDS_LIMIT + 1, SCALE), Fraction(CAST_IN_BOUNDS_LIMIT - 1, SCALE))]
    for _ in range(n):
        mag = rng.randrange(1, CAST_IN_BOUNDS_LIMIT + 1) if rng.random() < 0.5 else rng.randrange(1, 10 ** 9)
        hi = Fraction(mag, SCALE)
        lo = -Fraction(rng.randrange(0, CAST_IN_BOUNDS_LIMIT + 1), SCALE) if rng.random() < 0.5 else Fraction(0)
        out.append((lo, hi))
    return out


def test_binary64_step_of_the_argument():
    """fl(fl(b) * 10^6) is within 1/4 of b * 10^6 for every grid bound |b * 10^6| <= 2^50, so any
    rounding to the nearest integer of anything between the two scaled bounds stays within them."""
    rng = random.Random(17)
    for lo, hi in _grid_bounds(rng, 20000):
        for b in (lo, hi):
            target = b * SCALE
            got = float(b) * float(SCALE)              # Python floats: IEEE binary64, round to nearest
            assert abs(Fraction(got) - target) <= Fraction(1, 4), (b, got)
            assert round(got) == target
            # the largest double not above fl(b), and the smallest not below: still round to the bound
            for v in (math.nextafter(float(b), -math.inf), math.nextafter(float(b), math.inf)):
                r = round(v * float(SCALE))
                assert abs(r - target) <= 1


def test_the_analysis_marks_only_what_the_argument_covers():
    lo, hi, scale = exact_bounds(Fraction(0), Fraction(500000), "DOUBLE", False)
    assert scale == SCALE and cast_in_bounds("DOUBLE", lo, hi, scale)
    assert cast_in_bounds("double precision", lo, hi, scale) and cast_in_bounds("NUMERIC", lo, hi, scale)
    for t in ("REAL", "FLOAT", "float4", "DECIMAL(18,6)", "numeric(12,2)", "INTEGER", "BIGINT"):
        assert not cast_in_bounds(t, lo, hi, scale), t
    big = Fraction(CAST_IN_BOUNDS_LIMIT + 1, SCALE)
    assert not cast_in_bounds("DOUBLE", Fraction(0), big, SCALE)
    assert not cast_in_bounds("DOUBLE", -big, Fraction(0), SCALE)
    assert cast_in_bounds("DOUBLE", Fraction(0), Fraction(CAST_IN_BOUNDS_LIMIT, SCALE), SCALE)
    assert not cast_in_bounds("DOUBLE", Fraction(0), Fraction(1), 1)        # scale 1: an integer sum


def _values(bounds: list[tuple[Fraction, Fraction]]) -> list[float | None]:
    vals: list[float | None] = [None, math.nan, math.inf, -math.inf, 0.0, -0.0, 1.7976931348623157e308,
                                -1.7976931348623157e308, 5e-324, -5e-324, 2.0 ** 53, -(2.0 ** 53)]
    for lo, hi in bounds:
        for b in (lo, hi):
            f = float(b)
            vals += [f, math.nextafter(f, math.inf), math.nextafter(f, -math.inf),
                     float(b + Fraction(1, 2 * SCALE)), float(b - Fraction(1, 2 * SCALE)),
                     float(b + Fraction(1, SCALE)), float(b - Fraction(1, SCALE))]
    rng = random.Random(3)
    vals += [rng.uniform(-2e9, 2e9) for _ in range(200)]
    return vals


ENGINE_BOUNDS = [(Fraction(0), Fraction(500000)), (Fraction(-1, 10), Fraction(1, 10)),
                 (Fraction(-7, 10 ** 6), Fraction(123456789012345, 10 ** 6)),
                 (Fraction(-CAST_IN_BOUNDS_LIMIT, SCALE), Fraction(CAST_IN_BOUNDS_LIMIT, SCALE)),
                 (Fraction(0), Fraction(CAST_IN_BOUNDS_LIMIT - 3, SCALE))]


def _query(lo: Fraction, hi: Fraction, name: str, table: str) -> str:
    d = dialect(name)
    one = scaled_cast(exp.column("x"), lo, hi, SCALE, d)
    two = clamp(scaled_cast(exp.column("x"), lo, hi, SCALE, d), int(lo * SCALE), int(hi * SCALE))
    return exp.select(exp.alias_(one, "one"), exp.alias_(two, "two")).from_(table).sql(name)


def _check(rows: list[tuple], lo: Fraction, hi: Fraction) -> None:
    assert rows
    for one, two in rows:
        assert one == two, (lo, hi, one, two)
        assert one is None or lo * SCALE <= one <= hi * SCALE


def test_duckdb_single_clamp_equals_double_clamp():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v in _values(ENGINE_BOUNDS)])
    for lo, hi in ENGINE_BOUNDS:
        _check(con.execute(_query(lo, hi, "duckdb", "t")).fetchall(), lo, hi)


def test_postgres_single_clamp_equals_double_clamp(postgres_server):
    import psycopg
    with psycopg.connect(postgres_server, autocommit=True) as con:
        con.execute("CREATE TEMPORARY TABLE t_cast_in_bounds (x DOUBLE PRECISION)")
        with con.cursor() as cur:
            cur.executemany("INSERT INTO t_cast_in_bounds VALUES (%s)", [[v] for v in _values(ENGINE_BOUNDS)])
        for lo, hi in ENGINE_BOUNDS:
            _check(con.execute(_query(lo, hi, "postgres", "t_cast_in_bounds")).fetchall(), lo, hi)
        # PostgreSQL NUMERIC (the type its fractional expressions are computed in): exact throughout
        con.execute("CREATE TEMPORARY TABLE n_cast_in_bounds (x NUMERIC)")
        with con.cursor() as cur:
            cur.executemany("INSERT INTO n_cast_in_bounds VALUES (%s)",
                            [[v] for v in _values(ENGINE_BOUNDS) if v is None or math.isfinite(v)] + [["NaN"]])
        for lo, hi in ENGINE_BOUNDS:
            _check(con.execute(_query(lo, hi, "postgres", "n_cast_in_bounds")).fetchall(), lo, hi)


def test_a_float32_column_would_break_it():
    """Why REAL/FLOAT keep the integer clamp: in binary32 the scaled bound is not within 1/4."""
    con = duckdb.connect()
    lo, hi = Fraction(0), Fraction(123456789012345, 10 ** 6)
    got = con.execute(f"SELECT CAST(CAST({float(hi)} AS FLOAT) * 1000000 AS BIGINT)").fetchone()[0]
    assert got != hi * SCALE
