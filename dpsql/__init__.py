"""dpsql: differentially private SQL.

Ordinary aggregate SQL in; noisy answers with a per-analyst privacy budget out.

    import dpsql
    conn = dpsql.connect("people.duckdb", policy="policy.toml", analyst="alice")
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) AS n, AVG(income) FROM people GROUP BY state")
    cur.fetchall()
"""
from dpsql.errors import (AuthenticationFailed, BudgetExhausted, DatabaseError, DataError, EngineError,
                          Error, IntegrityError, InterfaceError, InternalError, InvalidSetting,
                          NotSupportedError, OperationalError, PolicyError, ProgrammingError,
                          ProtocolViolation, QueryRejected, SqlSyntaxError, Warning)
from dpsql.frontends.dbapi import Connection, Cursor, connect

__version__ = "0.1.0"

# PEP 249 module globals
apilevel = "2.0"
threadsafety = 1          # threads may share the module, not connections
paramstyle = "qmark"      # also $1 positional and :name with a mapping

STRING, BINARY, NUMBER, DATETIME, ROWID = "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID"

__all__ = [
    "connect", "Connection", "Cursor", "apilevel", "threadsafety", "paramstyle",
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError", "IntegrityError",
    "InternalError", "ProgrammingError", "NotSupportedError", "QueryRejected", "SqlSyntaxError",
    "InvalidSetting", "PolicyError", "BudgetExhausted", "AuthenticationFailed", "ProtocolViolation",
    "EngineError", "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID",
]
