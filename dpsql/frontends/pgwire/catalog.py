"""Driver introspection for the wire proxy: everything a client asks that is not an analyst query.

Every statement a client sends comes here first. Catalog.answer returns a Reply for
driver housekeeping (SET/SHOW of ordinary settings, transaction commands, DISCARD,
DEALLOCATE), constant SELECTs (version(), current_schema(), SELECT 1) and catalog queries
(pg_catalog, information_schema: psql's \\d, JDBC's DatabaseMetaData, SQLAlchemy's
reflection, psycopg's TypeInfo), and None for everything else, which goes to the Session.

Catalog queries never reach the backend engine: they run on an emulated catalog
(catalog_db) built from Session.tables() and fixed PostgreSQL 15 data, so they can show
names, types and OIDs but never rows, counts or statistics (reltuples is -1). A query that
mixes catalog relations with data tables, reads statistics views or calls a data-reading
function is refused with QueryRejected.

The emulation is the server's own work, so it is bounded (see limits.py): catalog_sql refuses
functions that could generate rows or text without bound, and every query here runs under a
Watchdog ([server] catalog_timeout), returns at most [server] catalog_max_rows rows, and stops
on cancel() (the server calls it on CancelRequest, disconnect and shutdown).
"""
from __future__ import annotations

import collections
import datetime
import decimal
import logging
import math
import re
import threading
import uuid
from dataclasses import dataclass

from dpsql.errors import InvalidSetting, QueryRejected
from dpsql.frontends.pgwire import catalog_db
from dpsql.frontends.pgwire.catalog_sql import Translated, classify
from dpsql.frontends.pgwire.limits import (
    QueryCanceled,
    RowLimitExceeded,
    StatementTimeout,
    Watchdog,
)
from dpsql.frontends.pgwire.statements import (
    BEGIN_RE,
    COMMIT_RE,
    DEALLOCATE_RE,
    DISCARD_RE,
    ISOLATION_RE,
    RELEASE_RE,
    RESET_RE,
    ROLLBACK_RE,
    ROLLBACK_TO_RE,
    SAVEPOINT_RE,
    SET_RE,
    SET_ROLE_RE,
    SHOW_RE,
    TRANSACTION_SETTING_RE,
    StatementKind,
    classify as statement_kind,
    normalize,
)

log = logging.getLogger("dpsql.pgwire")


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_size: int = -1
    type_modifier: int = -1


@dataclass
class Reply:
    columns: list[Column]
    rows: list[tuple[str | None, ...]]      # PostgreSQL text format
    tag: str


# (canonical name, value); keys are lower case. Values as PostgreSQL 15 reports them.
def _default_settings(server_version: str, user: str) -> dict[str, tuple[str, str]]:
    pairs = [
        ("server_version", server_version), ("server_version_num", "150000"), ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"), ("standard_conforming_strings", "on"), ("DateStyle", "ISO, MDY"),
        ("IntervalStyle", "postgres"), ("TimeZone", "UTC"), ("transaction_isolation", "read committed"),
        ("default_transaction_isolation", "read committed"), ("transaction_read_only", "on"),
        ("default_transaction_read_only", "on"), ("search_path", '"$user", public'),
        ("max_identifier_length", "63"), ("integer_datetimes", "on"), ("is_superuser", "off"),
        ("session_authorization", user), ("application_name", ""), ("extra_float_digits", "1"),
        ("lc_collate", "C.UTF-8"), ("lc_ctype", "C.UTF-8"), ("lc_messages", "C.UTF-8"),
        ("lc_monetary", "C.UTF-8"), ("lc_numeric", "C.UTF-8"), ("lc_time", "C.UTF-8"),
        ("bytea_output", "hex"), ("statement_timeout", "0"), ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"), ("default_table_access_method", "heap"),
        ("block_size", "8192"), ("max_index_keys", "32"), ("row_security", "on"),
        ("escape_string_warning", "on"), ("in_hot_standby", "off"), ("jit", "off"),
        ("synchronous_commit", "on"), ("client_min_messages", "notice"), ("xmloption", "content"),
        ("geqo", "on"), ("timezone_abbreviations", "Default"), ("default_with_oids", "off"),
    ]
    return {name.lower(): (name, value) for name, value in pairs}


_DESCRIPTIONS = {
    "server_version": "the PostgreSQL version dpsql emulates (fixed)",
    "server_version_num": "the PostgreSQL version dpsql emulates, as a number (fixed)",
    "server_encoding": "always UTF8 (fixed)", "client_encoding": "only UTF8 is accepted",
    "standard_conforming_strings": "always on (fixed)", "datestyle": "how dates are shown (ISO only)",
    "timezone": "accepted for clients; dates are released as stored",
    "transaction_read_only": "always on: dpsql only reads (fixed)",
    "default_transaction_read_only": "always on: dpsql only reads (fixed)",
    "is_superuser": "always off (fixed)", "session_authorization": "the analyst logged in (fixed)",
    "search_path": "accepted for clients; names resolve against the policy's tables",
    "extra_float_digits": "accepted for clients; floats are sent in shortest round-trip form",
    "statement_timeout": "accepted for clients; the policy's limits apply",
    "application_name": "the client's name, as it gave it",
}


# Settings a client may not change: they describe the server or would change what it sends.
_FIXED = {"server_version", "server_version_num", "server_encoding", "integer_datetimes", "is_superuser",
          "max_identifier_length", "block_size", "max_index_keys", "lc_collate", "lc_ctype",
          "session_authorization", "role", "transaction_read_only", "default_transaction_read_only",
          "standard_conforming_strings", "bytea_output", "in_hot_standby"}
_ALIASES = {"time zone": "timezone", "names": "client_encoding", "schema": "search_path",
            "transaction isolation level": "transaction_isolation", "session authorization": "session_authorization"}


def _setting_name(raw: str) -> str:
    """A setting's lower-case name, with SQL's spelled-out aliases (TIME ZONE, ...) mapped."""
    name = raw.strip('"').lower()
    return _ALIASES.get(re.sub(r"\s+", " ", name), name)


_KEEP_TEXTS = 256            # per connection: the texts classify() need not parse again
_KEEP_TEXT_CHARS = 8192


class Catalog:
    """One client's catalog: its settings and its connection to the emulated catalog."""

    def __init__(self, session, *, database: str, user: str, server_version: str = "15.0 (dpsql)",
                 timeout: float | None = None, max_rows: int | None = None):
        self.session, self.database, self.user = session, database, user
        self.server_version = server_version
        limits = getattr(getattr(session, "policy", None), "server", None)
        self.timeout = timeout if timeout is not None else getattr(limits, "catalog_timeout", 5.0)
        self.max_rows = max_rows if max_rows is not None else getattr(limits, "catalog_max_rows", 10_000)
        self._defaults = _default_settings(server_version, user)
        self.settings = dict(self._defaults)
        self._cur = None
        self._lock = threading.Lock()
        self._watch_lock = threading.Lock()
        self._watchdog: Watchdog | None = None
        self._cancelled = False
        # classify()'s answers for the texts this connection sent: it parses the whole text with
        # sqlglot (~0.3-2 ms), and its answer is a function of the text alone (the emulated
        # relations are fixed). Kept per connection, never shared between connections: a faster
        # answer then tells a client only that it sent the same text before, never that another
        # client did (a process-wide cache would, by timing, when the [timing] defence is off or
        # before it starts: classification runs before the Session's clock).
        self._classified: collections.OrderedDict[str, Translated] = collections.OrderedDict()

    def new_statement(self) -> None:
        """The server is about to hand this catalog a statement: forget an earlier cancel()."""
        with self._watch_lock:
            self._cancelled = False

    def cancel(self) -> None:
        """Stop the current statement's catalog query (from any thread). Sticky until the next
        new_statement(): a cancel that arrives before the query has started (while it is parsed,
        or the client's tables are built) stops it as soon as it starts."""
        with self._watch_lock:
            self._cancelled = True
            dog = self._watchdog
        if dog is not None:
            dog.cancel()

    @property
    def running(self) -> bool:
        with self._watch_lock:
            return self._watchdog is not None

    def close(self) -> None:
        """Close this client's connection to the emulated catalog (the shared part stays cached)."""
        self.cancel()
        with self._lock:
            cur, self._cur = self._cur, None
        if cur is not None:
            try:
                cur.close()
            except Exception:      # noqa: BLE001 - closing a private in-memory cursor; nothing to report
                pass

    # -- the two entry points
    def answer(self, sql: str, params: list[str | None] | None = None) -> Reply | None:
        text = normalize(sql)
        if not text:
            return None
        kind = statement_kind(text)
        handler = _COMMANDS.get(kind)
        if handler is not None:
            return handler(self, text)
        if kind is StatementKind.QUERY:
            return self._query(text, params)
        return None

    def describe(self, sql: str) -> list[Column] | None:
        text = normalize(sql)
        if not text:
            return None
        kind = statement_kind(text)
        if kind is StatementKind.SHOW:
            reply = self._show(text)
            return reply.columns if reply is not None else None
        if kind in (StatementKind.SET, StatementKind.RESET):   # only its own settings; no side effect
            return [] if self._owns_setting_statement(text) else None
        if kind in _COMMANDS:
            return []
        if kind is StatementKind.QUERY:
            reply = self._query(text, None, describe=True)
            return reply.columns if reply is not None else None
        return None

    # -- housekeeping
    def _set(self, text: str) -> Reply | None:
        if TRANSACTION_SETTING_RE.match(text):
            return Reply([], [], "SET")
        if SET_ROLE_RE.match(text):
            raise QueryRejected("SET ROLE / SESSION AUTHORIZATION", "the user is fixed when the client logs in")
        m = SET_RE.match(text)
        if m is None:
            return None
        name = re.sub(r"\s+", " ", m.group(2).strip('"').lower())
        name = _ALIASES.get(name, name)
        if name.startswith("dpsql."):
            return None
        if name in ("role", "session_authorization"):
            raise QueryRejected(f"SET {name}", "the user is fixed when the client logs in")
        value = m.group(3).strip()
        if name in _FIXED:
            raise QueryRejected(f"SET {name}", "this setting is fixed by the dpsql server")
        if value.lower() in ("default", "local") or not value:
            self._reset_one(name)
            return Reply([], [], "SET")
        parsed = _setting_value(value)
        if name == "client_encoding" and parsed.upper().replace("-", "").replace("_", "") not in ("UTF8", "UNICODE"):
            raise InvalidSetting("dpsql speaks only UTF8 as client_encoding")
        if name == "client_encoding":
            parsed = "UTF8"
        canonical = self.settings.get(name, (name, ""))[0]
        self._store(name, canonical, parsed)
        return Reply([], [], "SET")

    def _owns_setting_statement(self, text: str) -> bool:
        if TRANSACTION_SETTING_RE.match(text):
            return True
        m = SET_RE.match(text) or RESET_RE.match(text)
        if m is None:
            return False
        name = m.group(2 if m.re is SET_RE else 1).strip('"').lower()
        return not name.startswith("dpsql.") and name != "all"

    def _store(self, name: str, canonical: str, value: str) -> None:
        self.settings[name] = (canonical, value)
        if self._cur is not None:
            with self._lock:
                catalog_db.set_setting(self._cur, canonical, value)

    def _reset_one(self, name: str) -> None:
        if name in self._defaults:
            self._store(name, *self._defaults[name])
        else:
            self.settings.pop(name, None)
            if self._cur is not None:
                with self._lock:
                    self._cur.execute("DELETE FROM temp.main.pg_settings WHERE lower(name) = ?", [name])

    def _reset(self, text: str) -> Reply | None:
        m = RESET_RE.match(text)
        if m is None:
            return None
        name = _setting_name(m.group(1))
        if name.startswith("dpsql."):
            return None
        if name == "all":
            # ours reset here; None so that the Session resets the dpsql settings too
            for key in list(self.settings):
                self._reset_one(key)
            return None
        if name in _FIXED:
            raise QueryRejected(f"RESET {name}", "this setting is fixed by the dpsql server")
        self._reset_one(name)
        return Reply([], [], "RESET")

    def _show(self, text: str) -> Reply | None:
        m = SHOW_RE.match(text)
        if m is None:
            return None
        name = _setting_name(m.group(1))
        if name.startswith("dpsql."):
            return None
        if name == "all":
            rows = [(canon, value, _DESCRIPTIONS.get(canon.lower(), "emulated for clients; no effect on answers"))
                    for canon, value in sorted(self.settings.values(), key=lambda x: x[0].lower())]
            own = getattr(self.session, "settings", None)
            rows += list(own()) if own is not None else []
            return Reply([Column("name", 25), Column("setting", 25), Column("description", 25)], rows,
                         "SHOW")
        if name not in self.settings:
            raise QueryRejected(f"SHOW {name}", "unrecognized configuration parameter")
        canonical, value = self.settings[name]
        return Reply([Column(canonical, 25)], [(value,)], "SHOW")

    def _begin(self, text: str) -> Reply | None:
        if not BEGIN_RE.match(text):
            return None
        m = ISOLATION_RE.search(text)
        if m:
            self.settings["transaction_isolation"] = ("transaction_isolation", re.sub(r"\s+", " ", m.group(1).lower()))
        return Reply([], [], "START TRANSACTION" if text[:5].lower() == "start" else "BEGIN")

    def _commit(self, text: str) -> Reply | None:
        return Reply([], [], "COMMIT") if COMMIT_RE.match(text) else None

    def _rollback(self, text: str) -> Reply | None:
        if ROLLBACK_RE.match(text) or ROLLBACK_TO_RE.match(text):
            return Reply([], [], "ROLLBACK")
        return None

    def _savepoint(self, text: str) -> Reply | None:
        return Reply([], [], "SAVEPOINT") if SAVEPOINT_RE.match(text) else None

    def _release(self, text: str) -> Reply | None:
        return Reply([], [], "RELEASE") if RELEASE_RE.match(text) else None

    def _deallocate(self, text: str) -> Reply | None:
        m = DEALLOCATE_RE.match(text)
        if m is None:
            return None
        return Reply([], [], "DEALLOCATE ALL" if m.group(2).lower() == "all" else "DEALLOCATE")

    def _discard(self, text: str) -> Reply | None:
        m = DISCARD_RE.match(text)
        if m is None:
            return None
        if m.group(1).lower() == "all":
            for key in list(self.settings):
                self._reset_one(key)
        return Reply([], [], "DISCARD " + m.group(1).upper().replace("TEMPORARY", "TEMP"))

    # -- queries on the emulated catalog
    def _cursor(self):
        if self._cur is None:
            shared = catalog_db.shared_for(self.session.tables())
            values = {canon: value for canon, value in self.settings.values()}
            self._cur = catalog_db.client_tables(shared, user=self.user, database=self.database,
                                                 settings=values, server_version=self.server_version)
        return self._cur

    def _query(self, text: str, params: list[str | None] | None, *, describe: bool = False) -> Reply | None:
        t = self._classified.get(text)
        if t is not None:
            self._classified.move_to_end(text)
        else:
            t = classify(text)          # a refusal raises, and is not kept
            if len(text) <= _KEEP_TEXT_CHARS:
                self._classified[text] = t
                while len(self._classified) > _KEEP_TEXTS:
                    self._classified.popitem(last=False)
        if t.kind != "catalog":
            return None
        used = sorted({int(n) for n in re.findall(r"\$(\d+)", t.sql)})
        args = None
        if used:
            given = list(params or [])
            if describe or not given:
                given = [None] * max(used)
            if len(given) < max(used):
                raise QueryRejected("a catalog query", f"it uses ${max(used)} but {len(given)} parameter(s) were given")
            args = [given[i] if i < len(given) else None for i in range(max(used))]
        with self._lock:
            cur = self._cursor()
            description, rows = self._execute(cur, t.sql, args, describe)
        columns = []
        for i, d in enumerate(description):
            source = t.sources[i] if i < len(t.sources) else None
            oid = _column_oid(str(d[1]), source)
            name = t.names[i] if len(t.names) == len(description) else d[0]
            columns.append(Column(name, oid, _SIZES.get(oid, -1)))
        out = [tuple(_text(v) for v in r) for r in rows]
        return Reply(columns, out, f"SELECT {len(out)}")


    def _execute(self, cur, sql: str, args: list | None, describe: bool) -> tuple[list, list]:
        """Run one translated query under the Watchdog; at most max_rows rows, or an error.

        The time limit bounds what any catalog query can cost (catalog_sql leaves joins of
        catalog relations possible, and their size is a product); the row limit bounds what it
        can make the server hold and send. Both are refusals of the whole answer: a client never
        gets a partial catalog it would take for the complete one. Reading max_rows + 1 rows is
        enough to know, so a huge answer is never fetched whole."""
        dog = Watchdog(cur.interrupt, self.timeout)
        with self._watch_lock:
            if self._cancelled:
                raise QueryCanceled()
            self._watchdog = dog
        try:
            with dog:
                res = cur.execute(sql, args) if args is not None else cur.execute(sql)
                description = res.description or []
                rows = [] if describe else res.fetchmany(self.max_rows + 1)
        except Exception as err:
            if dog.reason == "timeout":
                log.info("catalog query stopped at the time limit (%g s)", self.timeout)
                raise StatementTimeout(self.timeout) from None
            if dog.reason == "cancel":
                log.info("catalog query cancelled")
                raise QueryCanceled() from None
            # the emulation cannot answer it; detail for the log only
            log.info("catalog query not answerable: %s", err)
            raise QueryRejected("this catalog query", "dpsql's emulated catalog cannot answer it",
                                "dpsql answers catalog queries with names and types only") from None
        finally:
            with self._watch_lock:
                self._watchdog = None
        if len(rows) > self.max_rows:
            raise RowLimitExceeded(self.max_rows)
        return description, rows


_COMMANDS = {
    StatementKind.SET: Catalog._set, StatementKind.SHOW: Catalog._show, StatementKind.RESET: Catalog._reset,
    StatementKind.BEGIN: Catalog._begin, StatementKind.COMMIT: Catalog._commit,
    StatementKind.ROLLBACK: Catalog._rollback, StatementKind.ROLLBACK_TO: Catalog._rollback,
    StatementKind.SAVEPOINT: Catalog._savepoint, StatementKind.RELEASE: Catalog._release,
    StatementKind.DEALLOCATE: Catalog._deallocate, StatementKind.DISCARD: Catalog._discard,
}


def _setting_value(value: str) -> str:
    """SET's value list as PostgreSQL shows it: quotes off, items joined by ', '."""
    items = []
    parts = re.findall(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[^,]+", value)
    for p in parts:
        p = p.strip()
        if p.startswith("'") and p.endswith("'"):
            items.append(p[1:-1].replace("''", "'"))
        elif p.startswith('"') or p:
            items.append(p)
    return ", ".join(items)


_DUCK_OIDS = {"BOOLEAN": 16, "TINYINT": 21, "SMALLINT": 21, "INTEGER": 23, "BIGINT": 20, "HUGEINT": 1700,
              "UTINYINT": 21, "USMALLINT": 23, "UINTEGER": 20, "UBIGINT": 1700, "FLOAT": 700, "DOUBLE": 701,
              "VARCHAR": 25, "DATE": 1082, "TIME": 1083, "TIMESTAMP": 1114, "TIMESTAMP WITH TIME ZONE": 1184,
              "INTERVAL": 1186, "BLOB": 17, "UUID": 2950, "JSON": 114, "NULL": 25, '"NULL"': 25}
_ARRAY_OIDS = {16: 1000, 21: 1005, 23: 1007, 20: 1016, 700: 1021, 701: 1022, 25: 1009, 1700: 1231, 1082: 1182,
               1114: 1115, 1184: 1185, 26: 1028, 19: 1003, 18: 1002}
_SIZES = {16: 1, 18: 1, 19: 64, 20: 8, 21: 2, 23: 4, 24: 4, 26: 4, 700: 4, 701: 8, 1082: 4, 1083: 8, 1114: 8,
          1184: 8, 1186: 16, 2950: 16, 2205: 4, 2206: 4}
_TEXTUAL = {18, 19, 24, 25, 1043, 2205, 2206, 194}
_INTEGRAL = {20, 21, 23, 26, 28}


def _duck_oid(duck: str) -> int:
    duck = duck.upper()
    if duck.endswith("[]"):
        return _ARRAY_OIDS.get(_duck_oid(duck[:-2]), 1009)
    if duck.startswith("DECIMAL"):
        return 1700
    return _DUCK_OIDS.get(duck, 25)


def _column_oid(duck: str, source: str | None) -> int:
    oid = _duck_oid(duck)
    if source is None or source not in catalog_db.COLUMN_OIDS:
        return oid
    want = catalog_db.COLUMN_OIDS[source]
    if want in _TEXTUAL and oid == 25 or want in _INTEGRAL and oid in _INTEGRAL or want == oid:
        return want
    if want in _ARRAY_OIDS.values() and oid in _ARRAY_OIDS.values():
        return want
    return oid


def _text(v) -> str | None:
    """A DuckDB value in PostgreSQL's text format."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return repr(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return "{" + ",".join(_array_item(x) for x in v) + "}"
    if isinstance(v, dict):
        return "(" + ",".join("" if x is None else _quote_item(_text(x), composite=True) for x in v.values()) + ")"
    if isinstance(v, datetime.datetime):
        s = v.isoformat(sep=" ")
        return re.sub(r"\+00:00$", "+00", s)
    if isinstance(v, (datetime.date, datetime.time, decimal.Decimal, uuid.UUID)):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    return str(v)


def _array_item(x) -> str:
    if x is None:
        return "NULL"
    return _quote_item(_text(x))


def _quote_item(s: str, composite: bool = False) -> str:
    special = '(),"\\ ' if composite else '{},"\\ '
    if s == "" or any(c in special or c.isspace() for c in s) or (not composite and s.upper() == "NULL"):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s
