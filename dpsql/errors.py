"""The PEP 249 exception tree, plus dpsql's own errors, in one registry by SQLSTATE.

As psycopg's ``psycopg.errors``: every concrete class declares its SQLSTATE once, in its class
body, and ``lookup(sqlstate)`` gives that class; the class's PEP 249 base (``pep249_base``) is
the one psycopg, JDBC or any PostgreSQL client raises for the same SQLSTATE when the error comes
through the wire proxy. No SQLSTATE is ever set on an instance: an error with another code is
another class. The PEP 249 family classes (OperationalError, DataError, ...) carry a default code
for when one is raised directly, but the registry gives a code's most specific class.

Messages never quote data values; they name constructs, settings and policy keys. A syntax error
carries ``position``: the 1-based character offset in the statement (PostgreSQL's Position field,
sent as ``P`` on the wire and drawn as a caret under the query by the CLI and REPL).
All errors pickle (their ``__reduce__`` rebuilds them from the message).
"""
from __future__ import annotations

from typing import ClassVar

_REGISTRY: dict[str, type] = {}
_FAMILY_DEFAULTS: dict[str, type] = {}


def lookup(sqlstate: str) -> type[Error]:
    """The dpsql error class for a SQLSTATE (as ``psycopg.errors.lookup``); KeyError if dpsql has
    none."""
    cls = _REGISTRY.get(sqlstate) or _FAMILY_DEFAULTS.get(sqlstate)
    if cls is None:
        raise KeyError(f"no dpsql error class for SQLSTATE {sqlstate!r}")
    return cls


def registry() -> dict[str, type[Error]]:
    """Every SQLSTATE dpsql raises, with its one class (a copy)."""
    return dict(_FAMILY_DEFAULTS) | dict(_REGISTRY)


class Warning(Exception):
    """A notice, e.g. a subset query that was surcharged."""
    sqlstate = "01000"


class Error(Exception):
    """Base of every dpsql error (PEP 249)."""
    sqlstate: ClassVar[str] = "XX000"
    _family: ClassVar[bool] = True          # a PEP 249 base: its code is a default, not its own

    def __init__(self, message: str = "", hint: str | None = None, *, position: int | None = None):
        super().__init__(message)
        self.hint = hint
        self.position = position            # 1-based character offset in the statement, or None

    def __init_subclass__(cls, family: bool = False, register: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._family = family
        code = cls.__dict__.get("sqlstate")
        if code is None or not register:
            return                          # inherits its parent's code (a narrower message), or client-side
        table = _FAMILY_DEFAULTS if family else _REGISTRY
        if code in table:
            raise TypeError(f"SQLSTATE {code} has two classes: {table[code].__name__} and {cls.__name__}")
        table[code] = cls

    @classmethod
    def pep249_base(cls) -> type[Error]:
        """The PEP 249 class this error is (what a DB-API user catches)."""
        for k in cls.__mro__:
            if k in _PEP249:
                return k
        return Error

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.hint, self.position, dict(self.__dict__)))

    def wire_fields(self) -> dict[str, str]:
        """ErrorResponse fields for the PostgreSQL wire protocol."""
        fields = {"S": "ERROR", "V": "ERROR", "C": self.sqlstate, "M": str(self)}
        if self.hint:
            fields["H"] = self.hint
        if self.position is not None:
            fields["P"] = str(self.position)
        return fields


def _rebuild(cls: type[Error], message: str, hint: str | None, position: int | None = None,
             state: dict | None = None) -> Error:
    err = Error.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state or {})
    err.hint, err.position = hint, position
    return err


class InterfaceError(Error, family=True, register=False):
    """Misuse of the interface: a closed cursor, a bad URL. Raised by the DB-API module itself,
    as psycopg's InterfaceError, which has no SQLSTATE: it is not in the registry. Its 08000 is
    only what the CLI shows and what the proxy would send if a connection could not be set up
    (connection_exception, which a psycopg client raises as OperationalError, as for any failed
    connection)."""
    sqlstate = "08000"


class DatabaseError(Error, family=True):
    sqlstate = "XX000"


class DataError(DatabaseError, family=True):
    sqlstate = "22000"


class OperationalError(DatabaseError, family=True):
    sqlstate = "58000"


class IntegrityError(DatabaseError, family=True):
    sqlstate = "23000"


class InternalError(DatabaseError):
    """A dpsql bug; dpsql fails closed (nothing is released)."""
    sqlstate = "XX000"


class ProgrammingError(DatabaseError, family=True):
    sqlstate = "42000"


class NotSupportedError(DatabaseError, family=True):
    """A DB-API feature, or a protocol version, dpsql does not offer (0A000 feature_not_supported)."""
    sqlstate = "0A000"


_PEP249 = (InterfaceError, DataError, OperationalError, IntegrityError, InternalError, ProgrammingError,
           NotSupportedError, DatabaseError, Error)


class QueryRejected(ProgrammingError):
    """Outside the accepted subset, or would weaken the guarantee.

    ``construct`` names what was refused, ``reason`` why it would break the
    guarantee; neither ever depends on the data.
    """
    sqlstate = "42501"

    def __init__(self, construct: str, reason: str, hint: str | None = None, *, position: int | None = None):
        super().__init__(f"{construct} is not allowed: {reason}", hint, position=position)
        self.construct, self.reason = construct, reason


class SqlSyntaxError(QueryRejected):
    """The text does not parse as SQL: PostgreSQL's 'syntax error at or near "X"', with the
    1-based character position of X (``position``)."""
    sqlstate = "42601"

    def __init__(self, detail: str, hint: str | None = None, *, position: int | None = None):
        # PostgreSQL's wording where the detail is a position: 'syntax error at or near "GROUP"'
        if detail.startswith("unterminated"):      # PostgreSQL's own wording: no 'syntax error' before it
            message = detail
        else:
            sep = " " if detail.startswith(("at or near", "at end of input")) else ": "
            message = f"syntax error{sep}{detail}"
        ProgrammingError.__init__(self, message, hint, position=position)
        self.construct, self.reason = "syntax", detail


class UndefinedTable(QueryRejected):
    """A table the policy and the schema do not know (PostgreSQL's 42P01)."""
    sqlstate = "42P01"


class UndefinedColumn(QueryRejected):
    """A column the table does not have (PostgreSQL's 42703)."""
    sqlstate = "42703"


class DuplicatePreparedStatement(ProgrammingError):
    sqlstate = "42P05"


class DuplicateCursor(ProgrammingError):
    """A portal name already in use."""
    sqlstate = "42P03"


class InvalidSqlStatementName(ProgrammingError):
    """No prepared statement of that name."""
    sqlstate = "26000"


class InvalidCursorName(ProgrammingError):
    """No portal of that name."""
    sqlstate = "34000"


class InvalidSetting(DataError):
    """A SET with a bad value, e.g. ``SET dpsql.epsilon = -1``."""
    sqlstate = "22023"


class InvalidTextRepresentation(DataError):
    """A parameter sent as text that is not a value of its type."""
    sqlstate = "22P02"


class InvalidBinaryRepresentation(DataError):
    """A parameter sent in binary that is not a value of its type."""
    sqlstate = "22P03"


class InFailedTransaction(InternalError):
    """A statement in a transaction block after an error (PostgreSQL's 25P02, which psycopg
    raises as InternalError)."""
    sqlstate = "25P02"

    def __init__(self, message: str = "current transaction is aborted, commands ignored until end of "
                                      "transaction block", hint: str | None = None):
        super().__init__(message, hint)


class PolicyError(OperationalError):
    """A malformed policy: names the file, the line where known, the key and the problem."""
    sqlstate = "F0000"


class BudgetExhausted(OperationalError):
    """The ledger refuses: the analyst's remaining budget cannot cover the query. ``resource``
    ("epsilon", "delta" or "rho") ran short: ``remaining`` is left and the query ``needed`` more."""
    sqlstate = "53000"

    def __init__(self, message: str = "", hint: str | None = None, *, resource: str | None = None,
                 remaining: float | None = None, needed: float | None = None):
        super().__init__(message, hint)
        self.resource, self.remaining, self.needed = resource, remaining, needed


class ConfigurationLimitExceeded(OperationalError):
    """A limit the policy configures was reached (53400), e.g. [server] max_concurrent_queries."""
    sqlstate = "53400"


class TooManyConnections(OperationalError):
    """The server's or the analyst's connection limit was reached (53300), e.g. [server]
    max_connections_per_analyst; PostgreSQL's code for "too many connections for role"."""
    sqlstate = "53300"


class ProgramLimitExceeded(OperationalError):
    """A statement or message beyond a size limit of the server (54000)."""
    sqlstate = "54000"


class QueryCanceled(OperationalError):
    """A statement stopped by a cancel request, a disconnect, a shutdown or a timeout (PostgreSQL's
    57014 query_canceled; psycopg's QueryCanceled is an OperationalError too)."""
    sqlstate = "57014"

    def __init__(self, message: str = "canceling statement due to user request", hint: str | None = None):
        super().__init__(message, hint)


class InvalidAuthorization(OperationalError):
    """A connection refused before authentication (28000), e.g. trust from a non-loopback address."""
    sqlstate = "28000"


class AuthenticationFailed(OperationalError):
    sqlstate = "28P01"


class ProtocolViolation(OperationalError):
    sqlstate = "08P01"


class EngineError(OperationalError):
    """The backend failed. The analyst sees only this generic message; the
    engine's own message (which may quote data) goes to the log."""
    sqlstate = "58000"


class SchemaChanged(EngineError):
    """A schema fact the query's plan relied on (a column's type, the unit's uniqueness or NOT
    NULL, a table being a base table) no longer held when the query ran: nothing ran and nothing
    was charged. The Session re-reads the schema and plans the query again once."""
    sqlstate = "40001"      # serialization_failure: the client may simply run it again


__all__ = [
    "AuthenticationFailed",
    "BudgetExhausted",
    "ConfigurationLimitExceeded",
    "DataError",
    "DatabaseError",
    "DuplicateCursor",
    "DuplicatePreparedStatement",
    "EngineError",
    "Error",
    "InFailedTransaction",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "InvalidAuthorization",
    "InvalidBinaryRepresentation",
    "InvalidCursorName",
    "InvalidSetting",
    "InvalidSqlStatementName",
    "InvalidTextRepresentation",
    "NotSupportedError",
    "OperationalError",
    "PolicyError",
    "ProgramLimitExceeded",
    "ProgrammingError",
    "ProtocolViolation",
    "QueryCanceled",
    "QueryRejected",
    "SchemaChanged",
    "TooManyConnections",
    "SqlSyntaxError",
    "UndefinedColumn",
    "UndefinedTable",
    "Warning",
    "lookup",
    "registry",
]
