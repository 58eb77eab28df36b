"""PEP 249 (DB-API 2.0) Connection and Cursor over a Session.

    conn = dpsql.connect("people.duckdb", policy="policy.toml", analyst="alice")
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) FROM people GROUP BY state")
    cur.fetchall(); cur.description; cur.accuracy; cur.half_widths

Beyond PEP 249, a cursor reports how noisy its last result is:
  cursor.accuracy     one entry per column: None for exact columns (group keys),
                      else an Accuracy(mechanism, noise_scale, ci95); for derived
                      columns (AVG, arithmetic of aggregates) noise_scale is None and
                      ci95 the widest of the per-value widths in half_widths, which
                      are simulated from the mechanisms' noise (dpsql.postprocess).
  cursor.half_widths  one tuple per fetched-or-not row: each value's 95% confidence
                      half-width (None for exact values).
  cursor.cost         the (epsilon, delta) the last statement was charged, or None.
  cursor.statusmessage  e.g. "SELECT 3", or the budget status after a private query.
  cursor.suppressed   groups removed by partition selection: 0 when none can have been (no
                      GROUP BY, or keys with public domains), None when partition selection
                      ran: how many it removed depends on the data and is not released.
  cursor.cached       True when the last private query repeated an identical earlier one and
                      got its answer again, free of charge (the reconstruction defence's cache).
Settings (also through the proxy, as SET/SHOW/RESET; SHOW ALL lists them with a description):
  SET dpsql.intervals = on   each noisy column c is followed by c_low and c_high, its 95% interval
  SET dpsql.round = on       noisy COUNTs as whole numbers, negative ones clamped to 0
                             (post-processing; off by default because the clamp biases counts near 0)
  SET dpsql.topk = 'noisy_max'  ORDER BY COUNT/SUM ... LIMIT k over a public domain: the top k keys by
                             report-noisy-max (docs/TOPK.md); the key column's accuracy and half-widths are None
Transactions: dpsql is read-only, so commit() and rollback() do nothing.

Parameters: execute(sql, params) binds each value as a literal in the parsed query, quoted by
dpsql and never formatted into the text (a value's quotes are data). Placeholders:
  ?            qmark (the module's paramstyle), with a sequence
  $1, $2       PostgreSQL's numbered parameters, with a sequence
  :name        with a mapping
  %s           psycopg's format style, with a sequence
  %(name)s     psycopg's pyformat style, with a mapping
In a query written with %s or %(name)s, %% is one literal percent (in strings too, as psycopg
reads it), and a %s inside a quoted string is text, not a placeholder. Values: numbers, strings,
booleans, dates, datetimes and None.

Errors: each class has one SQLSTATE (dpsql.errors.lookup) and the PEP 249 base psycopg raises
for it; a syntax error carries .position (1-based, PostgreSQL's Position), and hints name a fix.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dpsql.errors import InterfaceError, NotSupportedError
from dpsql.result import Result
from dpsql.session import Session

_TYPE = {"number": "NUMBER", "string": "STRING", "boolean": "NUMBER", "date": "DATETIME",
         "timestamp": "DATETIME"}


class Connection:
    def __init__(self, session: Session):
        self._session = session
        self._cursors: list[Cursor] = []

    @property
    def session(self) -> Session:
        return self._session

    @property
    def closed(self) -> bool:
        return self._session.closed

    def _check(self) -> None:
        if self._session.closed:
            raise InterfaceError("the connection is closed")

    def cursor(self) -> Cursor:
        self._check()
        cur = Cursor(self)
        return cur

    def close(self) -> None:
        self._session.close()

    def commit(self) -> None:
        self._check()

    def rollback(self) -> None:
        self._check()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # convenience, as sqlite3 and duckdb offer
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        return self.cursor().execute(sql, params)


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection):
        self.connection = connection
        self._result: Result | None = None
        self._pos = 0
        self._closed = False
        self.arraysize = 1

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed")
        self.connection._check()

    def _need_result(self) -> Result:
        self._check()
        if self._result is None or not self._result.columns:
            raise InterfaceError("no result set: execute a query first")
        return self._result

    # -- PEP 249
    @property
    def description(self):
        r = self._result
        if r is None or not r.columns:
            return None
        return [(name, _TYPE.get(t, "STRING"), None, None, None, None, None) for name, t in zip(r.columns, r.types)]

    @property
    def rowcount(self) -> int:
        r = self._result
        return len(r.rows) if r is not None and r.columns else -1

    def execute(self, operation: str, parameters: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        self._check()
        self._result, self._pos = None, 0
        self._result = self.connection.session.execute(operation, parameters)
        return self

    def executemany(self, operation: str, seq_of_parameters) -> Cursor:
        for params in seq_of_parameters:
            self.execute(operation, params)
        return self

    def fetchone(self):
        r = self._need_result()
        if self._pos >= len(r.rows):
            return None
        row = r.rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int | None = None):
        r = self._need_result()
        n = self.arraysize if size is None else size
        rows = r.rows[self._pos:self._pos + n]
        self._pos += len(rows)
        return rows

    def fetchall(self):
        r = self._need_result()
        rows = r.rows[self._pos:]
        self._pos = len(r.rows)
        return rows

    def close(self) -> None:
        self._closed = True
        self._result = None

    def setinputsizes(self, sizes) -> None:
        pass

    def setoutputsize(self, size, column=None) -> None:
        pass

    def callproc(self, *args, **kwargs):
        raise NotSupportedError("dpsql has no stored procedures")

    def nextset(self):
        raise NotSupportedError("dpsql returns one result set per statement")

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- dpsql extensions
    @property
    def accuracy(self):
        return list(self._result.accuracy) if self._result is not None else None

    @property
    def half_widths(self):
        return list(self._result.half_widths) if self._result is not None else None

    @property
    def suppressed(self) -> int | None:
        """Groups partition selection removed: 0 when no group can have been, None when it ran
        (its count depends on the data; see dpsql.postprocess.present and Result.suppressed)."""
        return self._result.suppressed if self._result is not None else None

    @property
    def cost(self):
        return self._result.cost if self._result is not None else None

    @property
    def cached(self) -> bool:
        return bool(self._result is not None and self._result.cached)

    @property
    def statusmessage(self) -> str | None:
        return self._result.status if self._result is not None else None

    @property
    def result(self) -> Result | None:
        return self._result


def connect(target: Any = None, *, policy: Any = None, analyst: str | None = None, **options: Any) -> Connection:
    """Open a private connection.

    target: a DuckDB file path, ':memory:', 'duckdb:///path' or a duckdb connection; a PostgreSQL
            URL 'postgresql://user@host:port/db' or a psycopg connection (connect as a role that may
            only SELECT; options: schema=, statement_timeout= seconds, connect_timeout=);
            None opens the bundled demo (its own policy and analyst by default).
    policy: a TOML file path or a dict of the same structure.
    analyst: whose budget is charged.
    """
    return Connection(Session.open(target, policy, analyst, **options))
