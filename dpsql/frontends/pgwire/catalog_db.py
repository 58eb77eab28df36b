"""The emulated pg_catalog and information_schema: a private in-memory DuckDB database.

It holds only names, types, OIDs and fixed settings: the schema an analyst may see
(Session.tables()) and PostgreSQL 15's built-in catalog rows (catalog_data). It never
holds a row of a data table and never reads a file (external access is off). One database
is built per schema and shared; each Catalog gets its own connection to it, with the
per-client parts (settings, user, database) in that connection's temp tables and macros.

Statistics are not emulated: reltuples is -1 and relpages 0 for every relation.
"""
from __future__ import annotations

import re
import threading
import zlib
from dataclasses import dataclass

import duckdb

from dpsql.frontends.pgwire import catalog_data as data
from dpsql.frontends.pgwire.types import pg_type

PG_CATALOG_OID, PUBLIC_OID, INFO_SCHEMA_OID, TOAST_OID = 11, 2200, 13207, 99
OWNER_OID = 10
DATABASE_OID = 16384
FIRST_USER_OID = 16385

# PostgreSQL type name (as catalog_data spells it) -> DuckDB column type, RowDescription OID
_TYPES = {
    "bool": ("BOOLEAN", 16), "bytea": ("BLOB", 17), "char": ("VARCHAR", 18), "name": ("VARCHAR", 19),
    "int8": ("BIGINT", 20), "int2": ("SMALLINT", 21), "int4": ("INTEGER", 23), "integer": ("INTEGER", 23),
    "regproc": ("VARCHAR", 24), "text": ("VARCHAR", 25), "oid": ("BIGINT", 26), "xid": ("VARCHAR", 28),
    "pg_node_tree": ("VARCHAR", 25), "float4": ("FLOAT", 700), "character varying": ("VARCHAR", 1043),
    "timestamptz": ("TIMESTAMPTZ", 1184), "timestamp with time zone": ("TIMESTAMPTZ", 1184),
    "regtype": ("VARCHAR", 2206), "anyarray": ("VARCHAR[]", 1009),
    "aclitem[]": ("VARCHAR[]", 1034), "char[]": ("VARCHAR[]", 1002), "name[]": ("VARCHAR[]", 1003),
    "int2[]": ("SMALLINT[]", 1005), "text[]": ("VARCHAR[]", 1009), "oid[]": ("BIGINT[]", 1028),
}
# Columns a client must never read, even emulated (PostgreSQL hides them from non-superusers too).
SECRET_COLUMNS = frozenset({"rolpassword"})


@dataclass(frozen=True, slots=True)
class Relation:
    schema: str          # pg_catalog | information_schema | public
    name: str
    oid: int
    kind: str            # r | v
    columns: tuple[tuple[str, str], ...]   # (name, PostgreSQL type name)
    per_client: bool = False               # lives in each connection's temp schema


_PER_CLIENT = {"pg_settings", "pg_database", "pg_roles", "pg_user", "pg_authid"}


def catalog_relations() -> dict[tuple[str, str], Relation]:
    out = {}
    for schema, rels in (("pg_catalog", data.PG_CATALOG), ("information_schema", data.INFORMATION_SCHEMA)):
        for name, (oid, kind, cols) in rels.items():
            cols = tuple(c for c in cols if c[0] not in SECRET_COLUMNS)
            out[(schema, name)] = Relation(schema, name, oid, kind, cols, name in _PER_CLIENT)
    return out


RELATIONS = catalog_relations()
# column name -> RowDescription OID, for output columns that are plain catalog columns
COLUMN_OIDS: dict[str, int] = {}
for _rel in RELATIONS.values():
    for _c, _t in _rel.columns:
        COLUMN_OIDS.setdefault(_c, _TYPES.get(_t, ("VARCHAR", 25))[1])


def duck_table(rel: Relation) -> str:
    """How a translated query names the relation in DuckDB."""
    if rel.per_client:
        return f'temp.main."{rel.name}"'
    return f'{"pgc" if rel.schema == "pg_catalog" else "pgi"}."{rel.name}"'


def user_oids(names) -> dict[str, int]:
    """Stable OIDs for the analyst-visible tables: from the name, not the data or the order of creation."""
    out, used = {}, set()
    for name in sorted(names):
        oid = FIRST_USER_OID + zlib.crc32(name.encode()) % 1_000_000_000
        while oid in used:
            oid += 1
        used.add(oid)
        out[name] = oid
    return out


def _typmod(sql_type: str) -> int:
    """atttypmod of numeric(p,s) and varchar(n); -1 otherwise."""
    m = re.match(r"\s*(decimal|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+))?\s*\)", sql_type, re.IGNORECASE)
    if m:
        return ((int(m.group(2)) << 16) | int(m.group(3) or 0)) + 4
    m = re.match(r"\s*(varchar|character varying)\s*\(\s*(\d+)\s*\)", sql_type, re.IGNORECASE)
    if m:
        return int(m.group(2)) + 4
    return -1


_TYPE_BY_OID = {int(r[0]): r for r in data.PG_TYPE_ROWS}
_TYPCOL = {c: i for i, c in enumerate(data.PG_TYPE_COLUMNS)}


def _type_row(oid: int, col: str):
    return _TYPE_BY_OID[oid][_TYPCOL[col]]


def _convert(value, pgtype: str):
    """catalog_data's text values -> Python values for DuckDB."""
    if value is None:
        return None
    duck = _TYPES.get(pgtype, ("VARCHAR", 25))[0]
    if duck == "BOOLEAN":
        return value in ("true", "t", True)
    if duck in ("BIGINT", "INTEGER", "SMALLINT"):
        return int(value)
    if duck == "FLOAT":
        return float(value)
    if duck.endswith("[]"):
        inner = value.strip("{}")
        items = [x.strip('"') for x in inner.split(",")] if inner else []
        return [int(x) for x in items] if duck != "VARCHAR[]" else items
    return value


class _Builder:
    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con

    def create(self, rel: Relation, rows: list[dict], *, temp: bool = False) -> None:
        cols = ", ".join(f'"{c}" {_TYPES.get(t, ("VARCHAR", 25))[0]}' for c, t in rel.columns)
        target = f'"{rel.name}"' if temp else duck_table(rel)
        self.con.execute(f"CREATE {'TEMP ' if temp else ''}TABLE {target} ({cols})")
        if rows:
            names = [c for c, _ in rel.columns]
            types = dict(rel.columns)
            values = [[_default(r, c, types[c]) for c in names] for r in rows]
            table = f'temp.main."{rel.name}"' if temp else target
            # one statement, column-wise: executemany is far slower for thousands of rows
            cols = ", ".join(f"unnest(CAST(${i + 1} AS {_TYPES.get(types[c], ('VARCHAR', 25))[0]}[]))"
                             for i, c in enumerate(names))
            self.con.execute(f"INSERT INTO {table} SELECT {cols}", [list(col) for col in zip(*values)])


def _default(row: dict, col: str, pgtype: str):
    if col in row:
        return _convert(row[col], pgtype) if isinstance(row[col], str) and pgtype not in (
            "name", "text", "char", "character varying", "regproc", "regtype", "pg_node_tree") else row[col]
    duck = _TYPES.get(pgtype, ("VARCHAR", 25))[0]
    if duck == "BOOLEAN":
        return False
    if duck in ("BIGINT", "INTEGER", "SMALLINT", "FLOAT"):
        return 0
    return None


def _class_row(oid: int, name: str, ns: int, kind: str, ncols: int) -> dict:
    return {"oid": oid, "relname": name, "relnamespace": ns, "reltype": 0, "reloftype": 0, "relowner": OWNER_OID,
            "relam": 2 if kind == "r" else 0, "relfilenode": 0, "reltablespace": 0, "relpages": 0,
            "reltuples": -1.0, "relallvisible": 0, "reltoastrelid": 0, "relhasindex": False,
            "relisshared": False, "relpersistence": "p", "relkind": kind, "relnatts": ncols, "relchecks": 0,
            "relhasrules": False, "relhastriggers": False, "relhassubclass": False, "relrowsecurity": False,
            "relforcerowsecurity": False, "relispopulated": True, "relreplident": "d" if kind == "r" else "n",
            "relispartition": False, "relrewrite": 0, "relfrozenxid": "0", "relminmxid": "0"}


def _attribute_rows(oid: int, columns: list[tuple[str, int, int]]) -> list[dict]:
    rows = []
    for i, (col, typ, typmod) in enumerate(columns, 1):
        rows.append({"attrelid": oid, "attname": col, "atttypid": typ, "attstattarget": -1,
                     "attlen": int(_type_row(typ, "typlen")), "attnum": i, "attndims": 0, "attcacheoff": -1,
                     "atttypmod": typmod, "attbyval": _type_row(typ, "typbyval") == "true",
                     "attalign": _type_row(typ, "typalign"), "attstorage": _type_row(typ, "typstorage"),
                     "attcompression": "", "attnotnull": False, "atthasdef": False, "atthasmissing": False,
                     "attidentity": "", "attgenerated": "", "attisdropped": False, "attislocal": True,
                     "attinhcount": 0, "attcollation": int(_type_row(typ, "typcollation"))})
    return rows


_CATALOG_TYPE_OIDS = {"name": 19, "oid": 26, "int2": 21, "int4": 23, "integer": 23, "int8": 20, "bool": 16,
                      "text": 25, "char": 18, "regproc": 24, "regtype": 2206, "float4": 700, "xid": 28,
                      "pg_node_tree": 194, "character varying": 1043, "timestamptz": 1184,
                      "timestamp with time zone": 1184, "bytea": 17, "aclitem[]": 1034, "char[]": 1002,
                      "name[]": 1003, "int2[]": 1005, "text[]": 1009, "oid[]": 1028, "anyarray": 2277}
_DATA_TYPE = {20: "bigint", 23: "integer", 21: "smallint", 701: "double precision", 700: "real", 25: "text",
              1043: "character varying", 16: "boolean", 1082: "date", 1083: "time without time zone",
              1114: "timestamp without time zone", 1184: "timestamp with time zone", 1700: "numeric",
              17: "bytea", 1186: "interval", 2950: "uuid", 19: "name", 26: "oid"}
_PRECISION = {20: (64, 2, 0), 23: (32, 2, 0), 21: (16, 2, 0), 701: (53, 2, None), 700: (24, 2, None),
              1700: (None, 10, None)}


def build_shared(tables: dict[str, dict[str, str]]) -> duckdb.DuckDBPyConnection:
    """The shared database for one schema: every catalog relation, rows for the visible tables."""
    con = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB",
                                             "autoload_known_extensions": False,
                                             "autoinstall_known_extensions": False})
    con.execute("CREATE SCHEMA pgc; CREATE SCHEMA pgi")
    b = _Builder(con)
    oids = user_oids(tables)
    classes, attributes = [], []
    for (schema, name), rel in sorted(RELATIONS.items()):
        ns = PG_CATALOG_OID if schema == "pg_catalog" else INFO_SCHEMA_OID
        classes.append(_class_row(rel.oid, name, ns, rel.kind, len(rel.columns)))
        attributes += _attribute_rows(rel.oid, [(c, _CATALOG_TYPE_OIDS.get(t, 25), -1) for c, t in rel.columns])
    info_tables, info_columns = [], []
    for name, cols in sorted(tables.items()):
        oid = oids[name]
        classes.append(_class_row(oid, name, PUBLIC_OID, "r", len(cols)))
        typed = [(c, pg_type(t).oid, _typmod(t or "")) for c, t in cols.items()]
        attributes += _attribute_rows(oid, typed)
        info_tables.append({"table_schema": "public", "table_name": name, "table_type": "BASE TABLE",
                            "is_insertable_into": "NO", "is_typed": "NO"})
        for i, (col, typ, typmod) in enumerate(typed, 1):
            prec, radix, scale = _PRECISION.get(typ, (None, None, None))
            info_columns.append({"table_schema": "public", "table_name": name, "column_name": col,
                                 "ordinal_position": i, "is_nullable": "YES",
                                 "data_type": _DATA_TYPE.get(typ, "text"), "numeric_precision": prec,
                                 "numeric_precision_radix": radix, "numeric_scale": scale,
                                 "udt_schema": "pg_catalog", "udt_name": _type_row(typ, "typname"),
                                 "dtd_identifier": str(i), "is_self_referencing": "NO", "is_identity": "NO",
                                 "is_generated": "NEVER", "is_updatable": "NO",
                                 "character_maximum_length": typmod - 4 if typ == 1043 and typmod > 0 else None})
    rows = {
        "pg_namespace": [{"oid": PG_CATALOG_OID, "nspname": "pg_catalog", "nspowner": OWNER_OID},
                         {"oid": PUBLIC_OID, "nspname": "public", "nspowner": OWNER_OID},
                         {"oid": INFO_SCHEMA_OID, "nspname": "information_schema", "nspowner": OWNER_OID},
                         {"oid": TOAST_OID, "nspname": "pg_toast", "nspowner": OWNER_OID}],
        "pg_class": classes,
        "pg_attribute": attributes,
        "pg_type": [dict(zip(data.PG_TYPE_COLUMNS, r)) for r in data.PG_TYPE_ROWS],
        "pg_am": [{"oid": 2, "amname": "heap", "amhandler": "heap_tableam_handler", "amtype": "t"},
                  {"oid": 403, "amname": "btree", "amhandler": "bthandler", "amtype": "i"},
                  {"oid": 405, "amname": "hash", "amhandler": "hashhandler", "amtype": "i"},
                  {"oid": 783, "amname": "gist", "amhandler": "gisthandler", "amtype": "i"},
                  {"oid": 2742, "amname": "gin", "amhandler": "ginhandler", "amtype": "i"},
                  {"oid": 4000, "amname": "spgist", "amhandler": "spghandler", "amtype": "i"},
                  {"oid": 3580, "amname": "brin", "amhandler": "brinhandler", "amtype": "i"}],
        "pg_collation": [{"oid": 100, "collname": "default", "collnamespace": PG_CATALOG_OID, "collowner": OWNER_OID,
                          "collprovider": "d", "collisdeterministic": True, "collencoding": -1},
                         {"oid": 950, "collname": "C", "collnamespace": PG_CATALOG_OID, "collowner": OWNER_OID,
                          "collprovider": "c", "collisdeterministic": True, "collencoding": -1,
                          "collcollate": "C", "collctype": "C"},
                         {"oid": 951, "collname": "POSIX", "collnamespace": PG_CATALOG_OID,
                          "collowner": OWNER_OID, "collprovider": "c", "collisdeterministic": True,
                          "collencoding": -1, "collcollate": "POSIX", "collctype": "POSIX"}],
        "pg_tablespace": [{"oid": 1663, "spcname": "pg_default", "spcowner": OWNER_OID},
                          {"oid": 1664, "spcname": "pg_global", "spcowner": OWNER_OID}],
        "pg_language": [{"oid": 12, "lanname": "internal", "lanowner": OWNER_OID},
                        {"oid": 13, "lanname": "c", "lanowner": OWNER_OID},
                        {"oid": 14, "lanname": "sql", "lanowner": OWNER_OID, "lanpltrusted": True}],
        "tables": info_tables,
        "columns": info_columns,
    }
    for rel in RELATIONS.values():
        if not rel.per_client:
            b.create(rel, rows.get(rel.name, []) if rel.schema == "pg_catalog" or rel.name in rows else [])
    # fixed lookup tables for the macros
    con.execute("CREATE TABLE pgc._format (oid BIGINT, fmt VARCHAR)")
    con.executemany("INSERT INTO pgc._format VALUES (?, ?)",
                    [[int(r[0]), data.FORMAT_TYPE.get(int(r[0]), r[1])] for r in data.PG_TYPE_ROWS])
    for sql in _SHARED_MACROS:
        con.execute(sql)
    return con


_SHARED_MACROS = [
    "CREATE MACRO _pg_format_type(t, m) AS CASE WHEN t IS NULL THEN NULL "
    "WHEN t = 1700 AND m >= 4 THEN 'numeric(' || ((m - 4) >> 16) || ',' || ((m - 4) & 65535) || ')' "
    "WHEN t = 1043 AND m >= 4 THEN 'character varying(' || (m - 4) || ')' "
    "ELSE coalesce((SELECT fmt FROM pgc._format _mf WHERE _mf.oid = t), '???') END",
    "CREATE MACRO _pg_regclass_out(x) AS (SELECT relname FROM pgc.pg_class _mc WHERE _mc.oid = x)",
    "CREATE MACRO _pg_regclass_in(s) AS (SELECT oid FROM pgc.pg_class _mc WHERE _mc.relname = "
    "regexp_replace(replace(s, '\"', ''), '^.*\\.', ''))",
    "CREATE MACRO _pg_regtype_out(x) AS (SELECT fmt FROM pgc._format _mf WHERE _mf.oid = x)",
    "CREATE MACRO _pg_regtype_in(s) AS (SELECT min(_mt.oid) FROM pgc.pg_type _mt JOIN pgc._format _mf ON _mf.oid = _mt.oid "
    "WHERE _mt.typname = regexp_replace(replace(s, '\"', ''), '^pg_catalog\\.', '') OR _mf.fmt = lower(s) "
    "OR (s LIKE '%[]' AND _mt.typname = '_' || regexp_replace(s, '\\[\\]$', '')))",
    "CREATE MACRO _pg_regproc_in(s) AS regexp_replace(s, '^.*\\.', '')",
    "CREATE MACRO _pg_regnamespace_out(x) AS (SELECT nspname FROM pgc.pg_namespace _mn WHERE _mn.oid = x)",
    "CREATE MACRO _pg_regnamespace_in(s) AS (SELECT oid FROM pgc.pg_namespace _mn WHERE _mn.nspname = s)",
    "CREATE MACRO _pg_expandarray(a) AS struct_pack(x := a[1], n := 1)",
    "CREATE MACRO _pg_table_is_visible(x) AS coalesce((SELECT relnamespace IN (11, 2200) "
    "FROM pgc.pg_class _mc WHERE _mc.oid = x), false)",
    "CREATE MACRO _pg_true0() AS true",
    "CREATE MACRO _pg_null0() AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO _pg_zero0() AS CAST(0 AS BIGINT)",
    "CREATE MACRO _pg_true1(a0) AS true",
    "CREATE MACRO _pg_null1(a0) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO _pg_zero1(a0) AS CAST(0 AS BIGINT)",
    "CREATE MACRO _pg_true2(a0, a1) AS true",
    "CREATE MACRO _pg_null2(a0, a1) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO _pg_zero2(a0, a1) AS CAST(0 AS BIGINT)",
    "CREATE MACRO _pg_true3(a0, a1, a2) AS true",
    "CREATE MACRO _pg_null3(a0, a1, a2) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO _pg_zero3(a0, a1, a2) AS CAST(0 AS BIGINT)",
    "CREATE MACRO _pg_true4(a0, a1, a2, a3) AS true",
    "CREATE MACRO _pg_null4(a0, a1, a2, a3) AS CAST(NULL AS VARCHAR)",
    "CREATE MACRO _pg_zero4(a0, a1, a2, a3) AS CAST(0 AS BIGINT)",
    "CREATE MACRO _pg_array_upper(a, d) AS CASE WHEN len(a) > 0 THEN len(a) END",
    "CREATE MACRO _pg_array_lower(a, d) AS CASE WHEN len(a) > 0 THEN 1 END",
    "CREATE MACRO _pg_quote_ident(s) AS CASE WHEN regexp_matches(s, '^[a-z_][a-z0-9_$]*$') THEN s "
    "ELSE '\"' || replace(s, '\"', '\"\"') || '\"' END",
    "CREATE MACRO _pg_encoding_to_char(e) AS CASE WHEN e = 6 THEN 'UTF8' WHEN e = 0 THEN 'SQL_ASCII' ELSE '' END",
    "CREATE MACRO _pg_size_pretty(n) AS n || ' bytes'",
]


def client_tables(con: duckdb.DuckDBPyConnection, *, user: str, database: str, settings: dict[str, str],
                  server_version: str) -> duckdb.DuckDBPyConnection:
    """A connection of one client: its temp relations (settings, user, database) and the macros on them."""
    cur = con.cursor()
    b = _Builder(cur)
    role = {"oid": OWNER_OID, "rolname": user, "rolsuper": False, "rolinherit": True, "rolcreaterole": False,
            "rolcreatedb": False, "rolcanlogin": True, "rolreplication": False, "rolconnlimit": -1,
            "rolpassword": "********", "rolbypassrls": False}
    user_row = {"usename": user, "usesysid": OWNER_OID, "usecreatedb": False, "usesuper": False,
                "userepl": False, "usebypassrls": False, "passwd": "********"}
    db = {"oid": DATABASE_OID, "datname": database, "datdba": OWNER_OID, "encoding": 6, "datlocprovider": "c",
          "datistemplate": False, "datallowconn": True, "datconnlimit": -1, "datcollate": "C.UTF-8",
          "datctype": "C.UTF-8", "dattablespace": 1663, "datfrozenxid": "0", "datminmxid": "1"}
    rows = {"pg_roles": [role], "pg_authid": [role], "pg_user": [user_row], "pg_database": [db],
            "pg_settings": [_setting_row(k, v) for k, v in sorted(settings.items())]}
    for rel in RELATIONS.values():
        if rel.per_client:
            b.create(rel, rows[rel.name], temp=True)
    esc = user.replace("'", "''")
    dbesc = database.replace("'", "''")
    version = f"PostgreSQL {server_version} on x86_64-pc-linux-gnu, dpsql differential-privacy proxy".replace("'", "''")
    for sql in [
        f"CREATE TEMP MACRO _pg_user() AS '{esc}'",
        f"CREATE TEMP MACRO _pg_database() AS '{dbesc}'",
        f"CREATE TEMP MACRO _pg_version() AS '{version}'",
        "CREATE TEMP MACRO _pg_get_userbyid(x) AS coalesce((SELECT rolname FROM temp.main.pg_roles _mr "
        "WHERE _mr.oid = x), 'unknown (OID=' || x || ')')",
        "CREATE TEMP MACRO _pg_current_setting(n) AS (SELECT setting FROM temp.main.pg_settings _ms "
        "WHERE lower(_ms.name) = lower(n))",
    ]:
        cur.execute(sql)
    return cur


def _setting_row(name: str, value: str) -> dict:
    return {"name": name, "setting": value, "category": "Client Connection Defaults", "short_desc": "",
            "context": "user", "vartype": "string", "source": "default", "boot_val": value, "reset_val": value,
            "pending_restart": False}


def set_setting(cur: duckdb.DuckDBPyConnection, name: str, value: str) -> None:
    cur.execute("DELETE FROM temp.main.pg_settings WHERE lower(name) = lower(?)", [name])
    cols = [c for c, _ in RELATIONS[("pg_catalog", "pg_settings")].columns]
    row = _setting_row(name, value)
    row["source"] = "session"
    cur.execute(f"INSERT INTO temp.main.pg_settings ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                [row.get(c, False if c == "pending_restart" else None) for c in cols])


_lock = threading.Lock()
_shared: dict[tuple, duckdb.DuckDBPyConnection] = {}


def shared_for(tables: dict[str, dict[str, str]]) -> duckdb.DuckDBPyConnection:
    """The shared database of a schema, built on first use (a handful of schemas per process)."""
    key = tuple(sorted((t, tuple(cols.items())) for t, cols in tables.items()))
    with _lock:
        con = _shared.get(key)
        if con is None:
            con = build_shared(tables)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            if len(_shared) > 16:
                _shared.pop(next(iter(_shared)))
            _shared[key] = con
        return con
