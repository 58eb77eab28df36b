"""Every expression the analysis lets reach an engine is total (engine-free half of the proof;
tests/integration/test_extreme_values.py runs the other half on DuckDB, PostgreSQL and Spark).

What is checked here is the SQL the analysis writes: LIKE patterns with a dangling escape are
refused and every pattern goes out with an explicit ESCAPE; columns are compared only at identical
types or through a cast that cannot fail on that engine; a DATE column only meets DATE literals; a
nanosecond timestamp only literals in its range; numeric literals on PostgreSQL stay NUMERIC."""
from __future__ import annotations

import pytest
from sqlglot import exp

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.errors import QueryRejected
from dpsql.policy import load_policy
from dpsql.rewrite import to_sql

DIALECTS = ("duckdb", "postgres", "spark")
TYPES = {
    "duckdb": {"pid": "BIGINT", "d": "DATE", "d2": "DATE", "ts": "TIMESTAMP", "tns": "TIMESTAMP_NS",
               "tz": "TIMESTAMP WITH TIME ZONE", "n": "DECIMAL(38,10)", "f": "DOUBLE", "i": "INTEGER",
               "h": "HUGEINT", "s": "VARCHAR", "c": "VARCHAR"},
    "postgres": {"pid": "bigint", "d": "date", "d2": "date", "ts": "timestamp without time zone",
                 "tns": "timestamp without time zone", "tz": "timestamp with time zone", "n": "numeric",
                 "f": "double precision", "i": "integer", "h": "bigint", "s": "text", "c": "character(4)"},
    "spark": {"pid": "bigint", "d": "date", "d2": "date", "ts": "timestamp_ntz", "tns": "timestamp_ntz",
              "tz": "timestamp", "n": "decimal(38,10)", "f": "double", "i": "int", "h": "bigint",
              "s": "string", "c": "char(4)"},
}
POLICY = load_policy({
    "budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": "unused.sqlite"},
    "defaults": {"epsilon": 1.0, "delta": 1e-6},
    "tables": {"x": {"privacy_unit": "pid", "columns": {
        "d": {}, "d2": {}, "ts": {}, "tns": {}, "tz": {}, "n": {"lower": 0, "upper": 10}, "f": {"lower": 0, "upper": 10},
        "i": {"lower": 0, "upper": 10}, "h": {}, "s": {}, "c": {"values": ["CA", "NY"]}}}},
})
SETTINGS = Settings(1.0, 1e-6, "laplace")


def plan(where: str, dialect: str = "duckdb"):
    schema = Schema(columns={"x": TYPES[dialect]}, base_tables=frozenset({"x"}))
    tree = classify(f"SELECT COUNT(*) FROM x WHERE {where}", dialect=dialect).tree
    return analyze(tree, POLICY, schema, SETTINGS, dialect)


def refused(where: str, dialect: str = "duckdb") -> str:
    with pytest.raises(QueryRejected) as err:
        plan(where, dialect)
    return str(err.value)


# ---------------------------------------------------------------------------------------- LIKE

@pytest.mark.parametrize("dialect", ("duckdb", "postgres"))     # Spark's string literals use \ escapes themselves
@pytest.mark.parametrize("pattern", ["a\\", "\\", "%\\", "a\\b", "\\a%", "%_\\ "])
def test_dangling_or_foreign_escape_refused(dialect, pattern):
    lit = pattern.replace("'", "''")
    assert "escape" in refused(f"s LIKE '{lit}'", dialect).lower()
    assert "escape" in refused(f"s NOT ILIKE '{lit}'", dialect).lower()


@pytest.mark.parametrize("dialect", ("duckdb", "postgres"))
@pytest.mark.parametrize("pattern", ["", "%", "_", "a\\%", "a\\_b", "\\\\", "x\\\\%", "100\\%"])
def test_wellformed_patterns_go_out_with_an_explicit_escape(dialect, pattern):
    p = plan(f"s LIKE '{pattern}' OR s ILIKE '{pattern}'", dialect)
    escapes = list(p.where.find_all(exp.Escape))
    assert len(escapes) == 2 and all(e.expression.this == "\\" for e in escapes)
    sql = to_sql(p, dialect)
    assert sql.count("ESCAPE") == 2


def test_user_escape_clause_and_long_patterns_refused():
    refused("s LIKE 'a!%' ESCAPE '!'")
    refused("s LIKE '" + "a" * 1001 + "'")
    plan("s LIKE '" + "a" * 1000 + "'")


# ---------------------------------------------------------------------------------------- dates and times

@pytest.mark.parametrize("dialect", DIALECTS)
def test_date_column_meets_only_date_literals(dialect):
    plan("d < DATE '2020-01-01' AND d BETWEEN DATE '0001-01-01' AND DATE '9999-12-31'", dialect)
    assert "date" in refused("d < TIMESTAMP '2020-01-01 00:00:00'", dialect).lower()
    refused("d IN (TIMESTAMP '2020-01-01 00:00:00')", dialect)
    refused("TIMESTAMP '2020-01-01 00:00:00' = d", dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_timestamp_columns_take_date_and_timestamp_literals(dialect):
    plan("ts < DATE '2020-01-01' AND tz >= TIMESTAMP '2020-01-01 10:00:00' AND ts <> TIMESTAMP '9999-12-31 00:00:00'",
         dialect)


def test_nanosecond_timestamps_only_meet_literals_in_their_range():
    plan("tns < DATE '2261-01-01'")
    plan("tns BETWEEN DATE '1678-01-01' AND TIMESTAMP '2261-12-31 23:59:59'")
    for lit in ("DATE '9999-12-31'", "DATE '0001-01-01'", "TIMESTAMP '2262-04-12 00:00:00'", "DATE '1677-01-01'"):
        assert "range" in refused(f"tns < {lit}")
        refused(f"tns IN ({lit})")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("pair", ["d = ts", "ts < tns", "tz = ts", "d < tz", "i = s", "d = s"])
def test_columns_of_different_date_or_foreign_types_are_not_compared(dialect, pair):
    if dialect in ("postgres", "spark") and pair == "ts < tns":
        plan(pair, dialect)        # one type there (no nanosecond timestamps)
        return
    refused(pair, dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_identical_types_compare_as_they_are(dialect):
    p = plan("d < d2 AND s = s AND i > i", dialect)
    assert not list(p.where.find_all(exp.Cast))


# ---------------------------------------------------------------------------------------- numbers

def test_numeric_column_pairs_are_cast_to_a_type_every_value_fits():
    for dialect, target in (("duckdb", exp.DataType.Type.DOUBLE), ("spark", exp.DataType.Type.DOUBLE),
                            ("postgres", exp.DataType.Type.DECIMAL)):
        casts = list(plan("n < f AND i = h", dialect).where.find_all(exp.Cast))
        assert len(casts) == 4 and {c.to.this for c in casts} == {target}, dialect


def test_numeric_literals_stay_numeric_on_postgres():
    """A NUMERIC column beyond 1e308 cannot be cast to float8: no column is cast there, and
    literals met by integer or NUMERIC columns stay NUMERIC."""
    p = plan("n > 1.5 AND f < 2 AND i BETWEEN -1.5 AND 3 AND n IN (1, 2.25)", "postgres")
    casts = list(p.where.find_all(exp.Cast))
    assert [c.this.this for c in casts] == ["2.0"]          # f's literal only, a constant (below)
    assert not any(isinstance(c.this, exp.Column) for c in casts)


@pytest.mark.parametrize("literal, value", [("1e-400", "0.0"), ("1e-50", "1e-50"), ("-1e-45", "-1e-45"),
                                            ("5e-324", "5e-324"), ("999999999999999999", "1e+18")])
def test_float_columns_meet_double_constants_on_postgres(literal, value):
    """PostgreSQL would convert a NUMERIC literal to the float column's type (real inside an IN
    list), failing on every run for 1e-400 or 1e-50 as real: the literal goes out as the double
    Python computes, which cannot fail, and the real column is widened to it."""
    for where in (f"f = {literal}", f"{literal} <= f", f"f IN ({literal}, 2)", f"f BETWEEN {literal} AND 3"):
        casts = list(plan(where, "postgres").where.find_all(exp.Cast))
        assert casts and all(c.to.this == exp.DataType.Type.DOUBLE and not isinstance(c.this, exp.Column)
                             for c in casts), where
        assert float(casts[0].this.sql()) == float(value)
    d = plan("n > 1.5 AND f < 2", "duckdb")
    assert {c.to.this for c in d.where.find_all(exp.Cast)} == {exp.DataType.Type.DOUBLE}


def test_spark_timestamp_literals_go_out_as_timestamp_ntz():
    """Spark converts a TIMESTAMP_NTZ column to TIMESTAMP, row by row, where it meets a TIMESTAMP
    literal (overflowing west of UTC on its largest values): literals go out as TIMESTAMP_NTZ,
    which a TIMESTAMP column converts instead (a constant). DATE literals stay DATE."""
    p = plan("tz < TIMESTAMP '2020-01-01 00:00:00' AND ts IN (TIMESTAMP '9999-12-31 23:59:59') "
             "AND tz BETWEEN DATE '2020-01-01' AND TIMESTAMP '2021-01-01 00:00:00'", "spark")
    kinds = [c.to.this for c in p.where.find_all(exp.Cast)]
    assert kinds.count(exp.DataType.Type.TIMESTAMPNTZ) == 3 and kinds.count(exp.DataType.Type.DATE) == 1
    assert "TIMESTAMP_NTZ" in to_sql(p, "spark")


def test_spark_refuses_two_columns_it_reports_as_timestamp():
    """Spark's engine reports TIMESTAMP and TIMESTAMP_NTZ alike; one of each would be converted row by row."""
    schema = Schema(columns={"x": {**TYPES["spark"], "d2": "TIMESTAMP", "d": "TIMESTAMP"}}, base_tables=frozenset({"x"}))
    tree = classify("SELECT COUNT(*) FROM x WHERE d < d2", dialect="spark").tree
    with pytest.raises(QueryRejected, match="TIMESTAMP"):
        analyze(tree, POLICY, schema, SETTINGS, "spark")
    plan("ts < tns", "spark")           # both TIMESTAMP_NTZ by name: one type, compared as they are


# ---------------------------------------------------------------------------------------- date functions in WHERE

BOUNDED = load_policy({
    "budget": {"epsilon": 10.0, "delta": 1e-3, "ledger": "unused.sqlite"},
    "defaults": {"epsilon": 1.0, "delta": 1e-6},
    "tables": {"x": {"privacy_unit": "pid", "columns": {
        "d": {"lower": "0001-01-01", "upper": "9999-12-31"}, "ts": {"lower": "0001-01-01", "upper": "9999-12-31"},
        "tns": {"lower": "1970-01-01", "upper": "2100-01-01"}, "tz": {"lower": "2000-01-01", "upper": "2001-01-01"}}}},
})


def bounded(where: str, dialect: str = "duckdb"):
    schema = Schema(columns={"x": TYPES[dialect]}, base_tables=frozenset({"x"}))
    return analyze(classify(f"SELECT COUNT(*) FROM x WHERE {where}").tree, BOUNDED, schema,   # read as dpsql reads it
                   SETTINGS, dialect)


def _clamped_only(p) -> bool:
    """Every read of a date column in the WHERE is inside a clamp (CASE WHEN col < lo ...), or a
    bare comparison of the column with a literal."""
    for col in p.where.find_all(exp.Column):
        parent = col.parent
        if isinstance(parent, (exp.LT, exp.GT)) and isinstance(parent.parent, exp.If):
            continue                    # the clamp's test
        if isinstance(parent, exp.Case):
            continue                    # the clamp's ELSE
        return False
    return True


@pytest.mark.parametrize("dialect", DIALECTS)
def test_date_functions_in_where_read_the_clamped_column_and_meet_literals_of_their_type(dialect):
    p = bounded("EXTRACT(year FROM d) = 9999 AND date_trunc('week', d) >= DATE '0001-01-01' "
                "AND EXTRACT(dow FROM d) IN (0, 6) AND date_part('doy', d) BETWEEN -999999999999999999 AND 1e18",
                dialect)
    assert _clamped_only(p)
    casts = [c for c in p.where.find_all(exp.Cast) if isinstance(c.this, exp.Column)]
    assert not casts, "a column is never converted: only the clamped value, inside the function"
    assert "refused" not in to_sql(p, dialect)


def test_extract_meets_numeric_literals_as_a_bigint_column_does():
    """EXTRACT is a BIGINT: an integral literal stays as it is, a fractional one goes out as a DOUBLE
    (DuckDB) or stays NUMERIC (PostgreSQL): both total against a BIGINT."""
    duck = bounded("EXTRACT(month FROM d) < 2.5 AND EXTRACT(month FROM d) = 3")
    assert {c.to.this for c in duck.where.find_all(exp.Cast) if isinstance(c.this, exp.Literal) and not c.this.is_string} \
        == {exp.DataType.Type.DOUBLE}
    pg = bounded("EXTRACT(month FROM d) < 2.5", "postgres")
    assert not [c for c in pg.where.find_all(exp.Cast) if isinstance(c.this, exp.Literal) and not c.this.is_string]


@pytest.mark.parametrize("dialect", ("duckdb", "postgres"))
def test_timestamp_functions_in_where(dialect):
    p = bounded("EXTRACT(hour FROM ts) = 23 AND date_trunc('hour', tns) < TIMESTAMP '9999-12-31 23:59:59.999999' "
                "AND date_trunc('minute', ts) > DATE '0001-01-01'", dialect)
    assert _clamped_only(p)
    # the nanosecond column's function is a plain TIMESTAMP: a literal beyond the column's own range
    # meets the clamped value, not the column (which still refuses it on DuckDB)
    if dialect == "duckdb":
        assert "range" in refused("tns < TIMESTAMP '9999-12-31 23:59:59.999999'", dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_zoned_timestamps_take_no_date_functions(dialect):
    with pytest.raises(QueryRejected, match="time zone|Spark"):
        bounded("EXTRACT(year FROM tz) = 2000", dialect)
