"""The core benchmark's seeded workload (dpsql.datagen, seed 0) in DuckDB files and in PostgreSQL.

DuckDB: benchmarks/.data/field_<N>.duckdb (people, visits), generated once and reused while the
row counts are right. PostgreSQL: database `dpsql_field`, one schema `n<N>` per size, loaded from
the DuckDB file by COPY (CSV through memory), with ANALYZE; reused while the row counts match.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

import duckdb
import psycopg

from dpsql import datagen

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
PG_DB = "dpsql_field"
COLUMNS = {
    "people": "person_id BIGINT NOT NULL, age INTEGER, income DOUBLE PRECISION, state VARCHAR, "
              "sex VARCHAR, education VARCHAR",
    "visits": "visit_id BIGINT, person_id BIGINT NOT NULL, visit_date DATE, state VARCHAR, "
              "cost DOUBLE PRECISION, kind VARCHAR",
}


def pg_url(admin: str = PG_ADMIN) -> str:
    """The URL of the benchmark's database on the admin URL's server."""
    return admin.rsplit("/", 1)[0] + "/" + PG_DB


def schema_name(people: int) -> str:
    return f"n{people}"


def duckdb_path(people: int, data_dir: Path) -> Path:
    return data_dir / f"field_{people}.duckdb"


def ensure_duckdb(people: int, data_dir: Path, log: Callable[[str], None] = print) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = duckdb_path(people, data_dir)
    if path.exists():
        try:
            con = duckdb.connect(str(path), read_only=True)
            try:
                n = con.execute("SELECT COUNT(*) FROM people").fetchone()[0]
                con.execute("SELECT COUNT(*) FROM visits").fetchone()
            finally:
                con.close()
            if n == people:
                return path
        except duckdb.Error:
            pass
    log(f"  generating {people:,} people into {path}")
    con = duckdb.connect(str(path))
    try:
        con.execute("SET enable_progress_bar = false")
        datagen.generate(con, people, seed=0)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def ensure_postgres(people: int, data_dir: Path, admin: str = PG_ADMIN,
                    log: Callable[[str], None] = print) -> tuple[str, str]:
    """(database URL, schema) holding people and visits for this size."""
    with psycopg.connect(admin, autocommit=True) as con:
        if not con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_DB]).fetchone():
            con.execute(f"CREATE DATABASE {PG_DB}")
    url, schema = pg_url(admin), schema_name(people)
    src = ensure_duckdb(people, data_dir, log)
    dcon = duckdb.connect(str(src), read_only=True)
    try:
        want = {t: dcon.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in COLUMNS}
        with psycopg.connect(url, autocommit=True) as con:
            have = {}
            for t in COLUMNS:
                try:
                    have[t] = con.execute(f"SELECT COUNT(*) FROM {schema}.{t}").fetchone()[0]
                except psycopg.errors.UndefinedTable:
                    have[t] = None
                except psycopg.errors.InvalidSchemaName:
                    have[t] = None
            if have == want:
                return url, schema
            log(f"  loading {people:,} people into PostgreSQL {PG_DB}.{schema}")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            for t, cols in COLUMNS.items():
                con.execute(f"DROP TABLE IF EXISTS {schema}.{t}")
                con.execute(f"CREATE TABLE {schema}.{t} ({cols})")
                names = [c.split()[0] for c in cols.split(", ")]
                cur = dcon.execute(f"SELECT {', '.join(names)} FROM {t} ORDER BY person_id")
                with con.cursor().copy(f"COPY {schema}.{t} ({', '.join(names)}) FROM STDIN") as cp:
                    while True:
                        batch = cur.fetchmany(100_000)
                        if not batch:
                            break
                        for row in batch:
                            cp.write_row(row)
                con.execute(f"ANALYZE {schema}.{t}")
    finally:
        dcon.close()
    return url, schema
