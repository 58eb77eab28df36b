"""PostgreSQL through psycopg 3.

Every query runs in its own READ ONLY transaction that is always rolled back, so no
statement can write, and no setting a query might change (set_config) outlives it.
A connection dpsql opens itself is also read-only by session default, has a fixed
search_path (the engine's schema, then pg_temp, so a temporary table never shadows a
real one) and an optional statement_timeout. A psycopg connection passed in by its
owner is used as it is (not closed); it must be idle, and each query still runs in a
READ ONLY transaction that is rolled back.

Each call runs exactly one SELECT (a binary cursor always uses the extended protocol,
which refuses several statements in one string). Connect as a role that may only
SELECT the tables the policy describes: READ ONLY does not stop a superuser's
server-side functions (the analysis lets no such function through, but the role is
the boundary that does not depend on it).

Schema facts a query relies on (the unit's PRIMARY KEY, column types and collations, NOT NULL,
a relation being a base table, the columns whose equality is not their text's: _INEXACT) are read in the query's own transaction after `LOCK TABLE ... IN ACCESS
SHARE MODE` on every relation it names: any DDL that could change them (ALTER TABLE, DROP,
CREATE OR REPLACE VIEW) needs a stronger lock, so it waits for the transaction to end, and a
change committed before the lock was granted is seen by the catalog read that follows it. The
facts checked are therefore the facts the query runs under.

The bounding salt reaches the engine as a named parameter (`%(salt)s` in the SQL
text sqlglot generates for PostgreSQL); every other `%` (LIKE patterns, modulo) is
escaped before psycopg sees the text, and a placeholder inside a string literal,
quoted identifier or comment stays text.
"""
from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.pq import TransactionStatus

from dpsql.engines.base import Expect, Rows, TableFacts, check_facts
from dpsql.errors import EngineError, InterfaceError, QueryCanceled

log = logging.getLogger("dpsql.engine")

_GENERIC = "the engine could not run the query (details are in the server log)"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_SELECT = re.compile(r"\s*(\(|SELECT\b|WITH\b|VALUES\b|TABLE\b|SHOW\b)", re.IGNORECASE)


# A column's type as dpsql names it: format_type, and for a collatable column whose collation is not
# the database's default, ` COLLATE <name>` (dpsql.analysis.predicates.collation). PostgreSQL
# raises "could not determine which collation to use" only when it meets rows (a sort, a hash, a
# comparison) of an expression mixing two such collations: an error that would depend on the data,
# so the analysis refuses queries that read two (Analysis.resolve). Part of the facts a query
# checks, so a changed collation is a changed schema.
_TYPE = ("format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attcollation NOT IN (0, 100) "
         "THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END")

# A column whose equality is not the equality of its text (TableFacts.inexact; why it matters:
# dpsql.analysis.bind.exact_equality): its collation is not deterministic (pg_collation.
# collisdeterministic: an ICU collation created with deterministic = false holds 'CA' and 'ca',
# or a composed and a decomposed 'é', equal), or its type, under any domains over it, is a
# collatable type from outside pg_catalog (citext, whose = is lower(a) = lower(b), and the like:
# an extension's text type has an equality of its own). A deterministic collation (the database's
# default, "C", a libc or ICU locale) holds two strings equal only when their bytes are: PostgreSQL
# breaks its ties by the bytes (since PostgreSQL 12; a database's default collation is always
# deterministic, an ICU one included: CREATE DATABASE takes no deterministic = false).
_INEXACT = """(COALESCE((SELECT NOT co.collisdeterministic FROM pg_collation co WHERE co.oid = a.attcollation), false)
   OR EXISTS (WITH RECURSIVE base(oid, typtype, typbasetype, typnamespace, typcollation) AS (
                SELECT t.oid, t.typtype, t.typbasetype, t.typnamespace, t.typcollation FROM pg_type t
                WHERE t.oid = a.atttypid
                UNION ALL
                SELECT t.oid, t.typtype, t.typbasetype, t.typnamespace, t.typcollation FROM pg_type t
                JOIN base b ON t.oid = b.typbasetype AND b.typtype = 'd')
              SELECT 1 FROM base WHERE typtype <> 'd' AND typcollation <> 0
                AND typnamespace <> 'pg_catalog'::regnamespace))"""

_FACTS = """SELECT n.nspname, c.relname, c.relkind, a.attname, """ + _TYPE.replace("{", "{{").replace("}", "}}") + """,
  a.attnotnull AND c.relkind IN ('r', 'p'),
  EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('p', 'u')
          AND k.conkey = ARRAY[a.attnum]::int2[])
  AND (c.relkind = 'p' OR NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)),
  """ + _INEXACT + """
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest({schemas}::text[], {names}::text[]))
  AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.oid, a.attnum"""
# On a connection dpsql opens, _FACTS for each set of relations is a prepared statement without
# parameters (the names are literals), so PostgreSQL plans it once and reuses the plan: planning the
# catalog join each time took ~0.4 ms of the server's CPU per query (with parameters PostgreSQL kept
# choosing custom plans, i.e. planned it every time). Names: _FACTS_PREPARED + a number.
_FACTS_PREPARED = "dpsql_facts_"


# PostgreSQL 14 added hash_record_extended, which the group choice's salted hash uses
# (dpsql.dialects).
MIN_SERVER_VERSION = 140000


class PostgresEngine:
    dialect = "postgres"
    facts_fixed = False       # other sessions may run DDL: facts are checked in each query's transaction

    def __init__(self, target: str | psycopg.Connection, *, schema: str = "public",
                 statement_timeout: float | None = None, connect_timeout: float = 10,
                 work_mem: str | None = None, jit: bool = False):
        """target: a postgresql:// URL or key=value conninfo, or an open psycopg Connection
        (used as it is, not owned). statement_timeout: seconds per query (None: the server's).
        work_mem (e.g. '256MB'; None: the server's) and jit apply to dpsql's transactions only;
        JIT is off by default: compiling the bounding query's expressions costs more than it saves."""
        if work_mem is not None and not re.fullmatch(r"\d+\s*(kB|MB|GB)?", work_mem):
            raise InterfaceError("work_mem must look like '64MB'")
        self._lock = threading.Lock()
        self._schema = schema.lower()
        self._timeout_ms = None if statement_timeout is None else max(1, int(statement_timeout * 1000))
        self.statement_timeout = statement_timeout     # the Session holds its own stages to it too
        self._work_mem, self._jit = work_mem or "", "on" if jit else "off"
        self._begin_texts: dict[tuple, str] = {}        # _begin's text per relations and settings
        self._options = {"schema": schema, "statement_timeout": statement_timeout, "connect_timeout": connect_timeout,
                         "work_mem": work_mem, "jit": jit}
        self._cancelling = False
        self._autocommit = True
        self._facts_prepared = False        # prepare _FACTS per relation set (only on a connection dpsql opened)
        self._prepared: list[str] = []      # the names prepared on this connection
        if isinstance(target, str):
            self._conninfo = target
            self._con = self._connect(target, connect_timeout)
            self._owned = True
            self._facts_prepared = True
            self.name = _describe(target)
        elif isinstance(target, psycopg.Connection):
            self._con = target
            self._owned = False
            info = target.info
            self._conninfo = psycopg.conninfo.make_conninfo(info.dsn, password=info.password) \
                if info.password else info.dsn
            self.name = "<connection>"
        else:
            raise InterfaceError(f"unsupported PostgreSQL target of type {type(target).__name__}")
        version = self._con.info.server_version
        if version < MIN_SERVER_VERSION:
            if self._owned:
                self._con.close()
            raise InterfaceError(f"dpsql needs PostgreSQL 14 or later; {self.name} runs "
                                 f"{version // 10000}.{version % 10000}",
                                 "upgrade the server (PostgreSQL 13 and older are out of support)")

    def _connect(self, conninfo: str, connect_timeout: float) -> psycopg.Connection:
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.Error:
            raise InterfaceError("not a valid PostgreSQL connection string") from None
        extra = {} if "connect_timeout" in params else {"connect_timeout": max(1, int(connect_timeout))}
        try:
            con = psycopg.connect(conninfo, autocommit=True, **extra)
        except psycopg.Error as err:
            log.warning("postgres connect failed: %s", err)
            raise InterfaceError(f"cannot connect to PostgreSQL at {_describe(conninfo)}") from None
        try:
            con.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            con.execute(pgsql.SQL("SET search_path = {}, pg_temp").format(pgsql.Identifier(self._schema)))
            if self._timeout_ms is not None:
                con.execute("SELECT set_config('statement_timeout', %s, false)", [f"{self._timeout_ms}ms"])
            superuser = con.execute("SELECT current_setting('is_superuser')").fetchone()[0] == "on"
        except psycopg.Error as err:
            con.close()
            log.warning("postgres session setup failed: %s", err)
            raise InterfaceError(f"cannot set up a read-only session on {_describe(conninfo)}") from None
        if superuser:
            log.warning("dpsql connects to PostgreSQL as a superuser: use a role that may only SELECT the "
                        "tables the policy describes")
        return con

    def clone(self) -> PostgresEngine:
        """A new engine on the same database with its own connection (owned by the clone),
        so queries run concurrently and interrupt() cancels only the clone's query."""
        return PostgresEngine(self._conninfo, **self._options)

    # -- queries
    def run(self, sql: str, params: Mapping[str, object] | None = None, *, expect: Expect | None = None,
            before: Callable[[], None] | None = None) -> Rows:
        text = _bound(sql, frozenset(params)) if params else sql
        if not _SELECT.match(text):
            raise EngineError("the engine runs SELECT queries only")
        with self._lock:
            self._cancelling = False
            try:
                facts = self._begin(list(expect) if expect else [])
                if expect:
                    check_facts(facts, expect)
                if before is not None:
                    before()
                cur = self._con.cursor(binary=True)
                cur.execute(text, dict(params) if params else None, prepare=False)
                desc = cur.description or []
                rows = cur.fetchall() if cur.description else []
            except psycopg.errors.QueryCanceled:
                if self._cancelling:
                    raise QueryCanceled("canceling statement due to user request: the query was cancelled") from None
                raise QueryCanceled("canceling statement due to statement timeout: the query ran longer than "
                                    "the engine's statement timeout") from None
            except psycopg.errors.UndefinedTable:
                if expect:          # LOCK TABLE found a relation gone: a schema change, not a data fact
                    check_facts({}, expect)
                raise EngineError(_GENERIC) from None
            except psycopg.Error as err:
                log.warning("postgres failed: %s", err)
                raise EngineError(_GENERIC) from None
            finally:
                self._end()
        types = tuple(self._type_name(d.type_code) for d in desc)
        return Rows(tuple(d.name for d in desc), types, rows)

    def _begin(self, lock: list[str]) -> dict[str, TableFacts]:
        """BEGIN READ ONLY; [LOCK TABLE the relations IN ACCESS SHARE MODE;] the transaction's own
        search_path, timeout, work_mem and jit; [their facts]: one round trip (the simple protocol,
        every value a quoted literal of dpsql's own). Returns the facts of the locked relations.

        The caller rolls back (_end). The set_config SELECT takes the transaction's snapshot, so
        nothing after it can switch the transaction to READ WRITE; the query itself then goes
        through a binary cursor, i.e. the extended protocol, which runs exactly one statement."""
        con = self._con
        if con.info.transaction_status != TransactionStatus.IDLE:
            raise EngineError("the PostgreSQL connection is busy or inside a transaction")
        self._autocommit = con.autocommit
        con.autocommit = True       # so that psycopg opens no transaction of its own
        names = [self._split(t) for t in lock]
        key = (tuple(names), self._schema, self._timeout_ms, self._work_mem, self._jit)
        cache = self._begin_texts
        text = cache.get(key)
        if text is None:
            if len(cache) >= 256:           # a session reads few table sets; keep it bounded anyway
                cache.clear()
                self._deallocate()
            text = self._begin_text(names)
            cache[key] = text
        cur = con.cursor()
        cur.execute(text, prepare=False)
        if not names:
            return {}
        while cur.nextset():
            pass
        return _facts_of(cur.fetchall(), lock, self._split)

    def _begin_text(self, names: list[tuple[str, str]]) -> str:
        """The text _begin sends, composed once per set of relations and settings (the proxy
        profile put a sixth of a query's Python time in composing it)."""
        con = self._con
        path = pgsql.Identifier(self._schema).as_string(con) + ", pg_temp"
        timeout = "" if self._timeout_ms is None else f"{self._timeout_ms}ms"
        settings = [pgsql.SQL("set_config('search_path', {}, true)").format(pgsql.Literal(path)),
                    pgsql.SQL("set_config('jit', {}, true)").format(pgsql.Literal(self._jit))]
        if timeout:
            settings.append(pgsql.SQL("set_config('statement_timeout', {}, true)").format(pgsql.Literal(timeout)))
        if self._work_mem:
            settings.append(pgsql.SQL("set_config('work_mem', {}, true)").format(pgsql.Literal(self._work_mem)))
        parts = [pgsql.SQL("BEGIN TRANSACTION READ ONLY")]
        if names:
            parts.append(pgsql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                pgsql.SQL(", ").join(pgsql.Identifier(sch, n) for sch, n in dict.fromkeys(names))))
        parts.append(pgsql.SQL("SELECT {}").format(pgsql.SQL(", ").join(settings)))
        if names:
            facts = pgsql.SQL(_FACTS).format(schemas=pgsql.Literal([sch for sch, _ in names]),
                                             names=pgsql.Literal([n for _, n in names]))
            if self._facts_prepared:        # the same query, planned once per connection and relation set
                name = pgsql.Identifier(f"{_FACTS_PREPARED}{len(self._prepared)}")
                con.execute(pgsql.SQL("PREPARE {} AS ").format(name) + facts, prepare=False)
                self._prepared.append(name.as_string(con))
                facts = pgsql.SQL("EXECUTE {}").format(name)
            parts.append(facts)             # (a connection of the caller's: inline, no state left on it)
        return pgsql.SQL("; ").join(parts).as_string(con)

    def _deallocate(self) -> None:
        """Drop the facts statements prepared on this connection (their texts are forgotten)."""
        names, self._prepared = self._prepared, []
        for name in names:
            self._con.execute(f"DEALLOCATE {name}", prepare=False)

    def _execute(self, text: str, params: dict | list | None) -> psycopg.Cursor:
        """BEGIN READ ONLY and the transaction's settings (_begin), then one SELECT through a
        binary cursor (the extended protocol: exactly one statement, no `; COMMIT; ...`)."""
        if not _SELECT.match(text):
            raise EngineError("the engine runs SELECT queries only")
        self._begin([])
        cur = self._con.cursor(binary=True)
        cur.execute(text, params, prepare=False)
        return cur

    def _end(self) -> None:
        con = self._con
        try:
            if con.info.transaction_status != TransactionStatus.IDLE and not con.closed:
                con.execute("ROLLBACK")
        except psycopg.Error as err:
            log.warning("postgres rollback failed: %s", err)
        finally:
            if not con.closed:
                try:
                    con.autocommit = self._autocommit
                except psycopg.Error:
                    pass

    def interrupt(self) -> None:
        """Cancel the running query (from another thread); nothing happens if none runs."""
        self._cancelling = True
        try:
            cancel = getattr(self._con, "cancel_safe", None) or self._con.cancel
            cancel()
        except psycopg.Error as err:
            log.warning("postgres cancel failed: %s", err)

    def _type_name(self, oid: int) -> str:
        """The type's PostgreSQL name (int8, numeric, float8, text, date, ...) for
        analysis.family(); "array" for arrays (the registry maps an array oid to its element)."""
        info = self._con.adapters.types.get(oid)
        if info is None:
            return "other"
        return "array" if info.oid != oid else info.name

    # -- catalog
    def _catalog(self, sql: str, params: list[Any]) -> list[tuple]:
        with self._lock:
            try:
                return self._execute(sql, params).fetchall()   # type: ignore[arg-type]
            except psycopg.Error as err:
                log.warning("postgres catalog query failed: %s", err)
                raise EngineError(_GENERIC) from None
            finally:
                self._end()

    def _split(self, table: str) -> tuple[str, str]:
        parts = table.lower().split(".")
        return (parts[-2], parts[-1]) if len(parts) > 1 else (self._schema, parts[-1])

    def table_columns(self, table: str) -> dict[str, str]:
        schema, name = self._split(table)
        rows = self._catalog(
            f"SELECT a.attname, {_TYPE} FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", [name, schema])
        if not rows:
            raise KeyError(table)
        return {c.lower(): t for c, t in rows}

    def unique_columns(self, table: str) -> set[str]:
        """Single-column PRIMARY KEY/UNIQUE constraints. None on a table with inheritance
        children (a plain parent's constraint does not cover its children's rows; a
        partitioned table's does, since it must include the partition key)."""
        f = self.facts([table]).get(table)
        return set(f.unique) if f is not None else set()

    def not_null_columns(self, table: str) -> set[str]:
        f = self.facts([table]).get(table)
        return set(f.not_null) if f is not None else set()

    def facts(self, tables: list[str]) -> dict[str, TableFacts]:
        """Every named relation's facts, in one catalog query (a missing relation is left out)."""
        names = [self._split(t) for t in tables]
        query = pgsql.SQL(_FACTS).format(schemas=pgsql.Placeholder(), names=pgsql.Placeholder())
        with self._lock:
            try:
                rows = self._execute(query.as_string(self._con), [[sch for sch, _ in names], [n for _, n in names]]).fetchall()
            except psycopg.Error as err:
                log.warning("postgres catalog query failed: %s", err)
                raise EngineError(_GENERIC) from None
            finally:
                self._end()
        return _facts_of(rows, tables, self._split)

    def namespace(self) -> tuple[str, str | None]:
        """The schema an unqualified table name is read from (the search_path dpsql sets: this
        schema, then pg_temp) and the database's name, the only catalog a name may carry."""
        return self._schema, self._con.info.dbname

    def base_tables(self) -> set[str]:
        """Ordinary and partitioned tables of the engine's schema (never the catalogs or temp tables)."""
        return self._relations("('r', 'p')")

    def views(self) -> set[str]:
        """Views, materialized views and foreign tables of the engine's schema: each may
        read data the policy does not describe."""
        return self._relations("('v', 'm', 'f')")

    def _relations(self, kinds: str) -> set[str]:
        rows = self._catalog(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.relkind IN {kinds} AND n.nspname = %s AND NOT c.relispartition", [self._schema])
        return {r[0].lower() for r in rows}

    def close(self) -> None:
        if self._owned and not self._con.closed:
            self._con.close()


def _facts_of(rows: list[tuple], tables: list[str], split: Callable[[str], tuple[str, str]]) -> dict[str, TableFacts]:
    """TableFacts per requested name from _FACTS's rows (schema, relation, relkind, column, type,
    NOT NULL, single-column key, inexact equality). PostgreSQL has no default collation other than
    the database's, a deterministic one: collation ''."""
    parts: dict[tuple[str, str], tuple[str, list, set, set, set]] = {}
    for schema, rel, kind, col, typ, not_null, unique, inexact in rows:
        entry = parts.setdefault((schema, rel), ("table" if kind in ("r", "p") else "view", [], set(), set(), set()))
        entry[1].append((col.lower(), typ))
        if not_null:
            entry[2].add(col.lower())
        if unique:
            entry[3].add(col.lower())
        if inexact:
            entry[4].add(col.lower())
    out = {}
    for t in tables:
        e = parts.get(split(t))
        if e is not None:
            out[t] = TableFacts(e[0], tuple(e[1]), frozenset(e[3]), frozenset(e[2]), frozenset(e[4]), "")
    return out


@functools.lru_cache(maxsize=256)
def _bound(sql: str, names: frozenset[str]) -> str:
    """_bind, kept per text and parameter names (it depends on nothing else): the character loop
    took ~1 ms of Python a query on a GROUP BY query's rewrite, whose text a session repeats."""
    return _bind(sql, names)


def _bind(sql: str, params: Mapping[str, object] | frozenset[str]) -> str:
    """The SQL text for psycopg: `%(name)s` outside quotes and comments stays a
    placeholder when `name` is a parameter; every other `%` becomes `%%`."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "'" or ch == '"':
            backslash = ch == "'" and i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            j = i + 1
            while j < n:
                if backslash and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i:j + 1].replace("%", "%%"))
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif ch == "$" and (m := re.match(r"\$([A-Za-z_]\w*)?\$", sql[i:])) and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            tag = m.group(0)
            j = sql.find(tag, i + len(tag))
            j = n if j < 0 else j + len(tag)
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif ch == "%":
            m = _PLACEHOLDER.match(sql, i)
            if m and m.group(1) in params:
                out.append(m.group(0))
                i = m.end()
            else:
                out.append("%%")
                i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _describe(conninfo: str) -> str:
    """host:port/dbname, never the password."""
    try:
        p = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<invalid connection string>"
    return f"{p.get('host', 'localhost')}:{p.get('port', 5432)}/{p.get('dbname', p.get('user', ''))}"
