"""The PEP 249 exception tree, plus dpsql's own errors.

Every error carries a ``sqlstate``: its class prefix is what makes psycopg or JDBC
behind the wire proxy raise the same PEP 249 class the DB-API module raises.
Messages never quote data values; they name constructs, settings and policy keys.
All errors pickle (their ``__reduce__`` rebuilds them from the message).
"""
from __future__ import annotations


class Warning(Exception):  # noqa: A001 - PEP 249 name
    """A notice, e.g. a subset query that was surcharged."""
    sqlstate = "01000"


class Error(Exception):
    """Base of every dpsql error (PEP 249)."""
    sqlstate = "XX000"

    def __init__(self, message: str = "", hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.hint))

    def wire_fields(self) -> dict[str, str]:
        """ErrorResponse fields for the PostgreSQL wire protocol."""
        fields = {"S": "ERROR", "V": "ERROR", "C": self.sqlstate, "M": str(self)}
        return fields | ({"H": self.hint} if self.hint else {})


def _rebuild(cls: type[Error], message: str, hint: str | None) -> Error:
    err = Error.__new__(cls)
    Exception.__init__(err, message)
    err.hint = hint
    return err


class InterfaceError(Error):
    """Misuse of the interface: a closed cursor, a bad URL."""
    sqlstate = "08000"


class DatabaseError(Error):
    sqlstate = "XX000"


class DataError(DatabaseError):
    sqlstate = "22000"


class OperationalError(DatabaseError):
    sqlstate = "58000"


class IntegrityError(DatabaseError):
    sqlstate = "23000"


class InternalError(DatabaseError):
    """A dpsql bug; dpsql fails closed (nothing is released)."""
    sqlstate = "XX000"


class ProgrammingError(DatabaseError):
    sqlstate = "42000"


class NotSupportedError(DatabaseError):
    """A DB-API feature dpsql does not offer."""
    sqlstate = "0A000"


class QueryRejected(ProgrammingError):
    """Outside the accepted subset, or would weaken the guarantee.

    ``construct`` names what was refused, ``reason`` why it would break the
    guarantee; neither ever depends on the data.
    """
    sqlstate = "42501"

    def __init__(self, construct: str, reason: str, hint: str | None = None):
        super().__init__(f"{construct} is not allowed: {reason}", hint)
        self.construct, self.reason = construct, reason


class SqlSyntaxError(QueryRejected):
    """The text does not parse as SQL."""
    sqlstate = "42601"

    def __init__(self, detail: str, hint: str | None = None):
        ProgrammingError.__init__(self, f"syntax error: {detail}", hint)
        self.construct, self.reason = "syntax", detail


class InvalidSetting(DataError):
    """A SET with a bad value, e.g. ``SET dpsql.epsilon = -1``."""
    sqlstate = "22023"


class PolicyError(OperationalError):
    """A malformed policy: names the file, the key and the problem."""
    sqlstate = "F0000"


class BudgetExhausted(OperationalError):
    """The ledger refuses: the analyst's remaining budget cannot cover the query."""
    sqlstate = "53000"


class AuthenticationFailed(OperationalError):
    sqlstate = "28P01"


class ProtocolViolation(OperationalError):
    sqlstate = "08P01"


class EngineError(OperationalError):
    """The backend failed. The analyst sees only this generic message; the
    engine's own message (which may quote data) goes to the log."""
    sqlstate = "58000"


__all__ = [
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError", "QueryRejected",
    "SqlSyntaxError", "InvalidSetting", "PolicyError", "BudgetExhausted", "AuthenticationFailed",
    "ProtocolViolation", "EngineError",
]
