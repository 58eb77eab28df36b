"""dpsql: differentially private SQL.

Ordinary aggregate SQL in; noisy answers with a per-analyst privacy budget out.

    import dpsql
    conn = dpsql.connect("people.duckdb", policy="policy.toml", analyst="alice")
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) AS n, AVG(income) FROM people GROUP BY state")
    cur.fetchall()
"""
from dpsql.errors import (
                          AuthenticationFailed,
                          BudgetExhausted,
                          DatabaseError,
                          DataError,
                          EngineError,
                          Error,
                          IntegrityError,
                          InterfaceError,
                          InternalError,
                          InvalidSetting,
                          NotSupportedError,
                          OperationalError,
                          PolicyError,
                          ProgrammingError,
                          ProtocolViolation,
                          QueryCanceled,
                          QueryRejected,
                          SqlSyntaxError,
                          Warning,
)
from dpsql.errors import lookup as lookup_error
from dpsql.frontends.dbapi import Connection, Cursor, connect

__version__ = "0.1.0"

# PEP 249 module globals
apilevel = "2.0"
threadsafety = 1          # threads may share the module, not connections
paramstyle = "qmark"      # also $1, %s (sequences), :name and %(name)s (mappings): see dpsql.frontends.dbapi

STRING, BINARY, NUMBER, DATETIME, ROWID = "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID"

__all__ = [
                          "BINARY",
                          "DATETIME",
                          "NUMBER",
                          "ROWID",
                          "STRING",
                          "AuthenticationFailed",
                          "BudgetExhausted",
                          "Connection",
                          "Cursor",
                          "DataError",
                          "DatabaseError",
                          "EngineError",
                          "Error",
                          "IntegrityError",
                          "InterfaceError",
                          "InternalError",
                          "InvalidSetting",
                          "NotSupportedError",
                          "OperationalError",
                          "PolicyError",
                          "ProgrammingError",
                          "ProtocolViolation",
                          "QueryCanceled",
                          "QueryRejected",
                          "SqlSyntaxError",
                          "Warning",
                          "apilevel",
                          "connect",
                          "lookup_error",
                          "paramstyle",
                          "threadsafety",
]
