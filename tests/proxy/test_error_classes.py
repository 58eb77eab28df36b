"""Every dpsql error kind is the PEP 249 class a psycopg user gets for its SQLSTATE.

dpsql.errors holds one class per SQLSTATE (dpsql.errors.lookup), as psycopg.errors does. Here
each kind that a statement can trigger is triggered twice, with the same statement: through the
real proxy with real psycopg, and through dpsql's own DB-API. The SQLSTATE and message must be the
same, and the PEP 249 base class of psycopg's exception must be the one of dpsql's. The kinds no
statement can trigger over the wire (a policy error, a schema change, an engine failure, protocol
states) are compared class by class against psycopg.errors.lookup."""
from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import errors as pgerr

import dpsql
import dpsql.errors as de
from tests.proxy.conftest import SLOW_SECONDS, SlowEngine, start_proxy

PG_BASES = (psycopg.InterfaceError, psycopg.DataError, psycopg.OperationalError, psycopg.IntegrityError,
            psycopg.InternalError, psycopg.ProgrammingError, psycopg.NotSupportedError, psycopg.DatabaseError,
            psycopg.Error)


def pg_base(cls: type) -> str:
    return next(b for b in cls.__mro__ if b in PG_BASES).__name__


@pytest.fixture(scope="module")
def proxy(people_db, tmp_path_factory):
    p = start_proxy(people_db, tmp_path_factory.mktemp("errors"),
                    policy={"public": {"tables": ["regions", "nowhere"]}})
    yield p
    p.server.stop()
    p.backend.close()


def test_the_registry_matches_psycopg_class_by_class():
    reg = de.registry()
    assert len(set(reg.values())) == len(reg)            # one class per SQLSTATE
    for code, cls in reg.items():
        assert cls.sqlstate == code and de.lookup(code) is cls
        assert cls.pep249_base().__name__ == pg_base(pgerr.lookup(code)), code
    assert de.lookup("57014") is de.QueryCanceled and issubclass(de.QueryCanceled, de.OperationalError)
    with pytest.raises(KeyError):
        de.lookup("08000")       # InterfaceError is client-side, as psycopg's (no SQLSTATE of its own)


def test_no_sqlstate_is_set_on_an_instance():
    """Every error raised in dpsql takes its SQLSTATE from its class."""
    import pathlib
    import re
    root = pathlib.Path(dpsql.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\w+\.sqlstate\s*=[^=]", text), path


STATEMENTS = [
    # (kind, analyst, setup statements, the statement)
    (de.SqlSyntaxError, "alice", [], "SELEC COUNT(*) FROM people"),
    (de.QueryRejected, "alice", [], "SELECT * FROM people"),
    (de.UndefinedColumn, "alice", [], "SELECT COUNT(*) FROM people WHERE agee > 1"),
    (de.UndefinedTable, "alice", [], "SELECT COUNT(*) FROM nowhere"),
    (de.InvalidSetting, "alice", [], "SET dpsql.epsilon = -1"),
    (de.BudgetExhausted, "poor", ["SET dpsql.epsilon = 0.3"], "SELECT COUNT(*) FROM people WHERE age > 2"),
]


@pytest.mark.parametrize("kind, analyst, setup, sql", STATEMENTS, ids=[s[0].__name__ for s in STATEMENTS])
def test_same_statement_same_class_through_psycopg_and_the_dbapi(proxy, people_db, kind, analyst, setup, sql):
    with psycopg.connect(proxy.dsn(analyst), autocommit=True) as wire, \
            dpsql.connect(people_db, policy=proxy.backend.policy, analyst=analyst) as conn:
        cur = conn.cursor()
        for s in setup:
            wire.execute(s)
            cur.execute(s)
        if kind is de.BudgetExhausted:       # another session spends most of the budget first
            with dpsql.connect(people_db, policy=proxy.backend.policy, analyst=analyst) as other:
                other.cursor().execute("SET dpsql.epsilon = 0.3")
                other.cursor().execute("SELECT COUNT(*) FROM people")
        with pytest.raises(psycopg.Error) as got_wire:
            wire.execute(sql)
        with pytest.raises(dpsql.Error) as got_dbapi:
            cur.execute(sql)
    w, d = got_wire.value, got_dbapi.value
    assert type(d) is kind
    assert w.sqlstate == d.sqlstate == kind.sqlstate
    assert pg_base(type(w)) == d.pep249_base().__name__ == kind.pep249_base().__name__
    assert w.diag.message_primary == str(d)
    assert (w.diag.message_hint or None) == d.hint
    if d.position is not None:
        assert w.diag.statement_position == str(d.position)


def test_syntax_error_position_and_hint_on_the_wire(proxy):
    with psycopg.connect(proxy.dsn(), autocommit=True) as c:
        sql = "SELECT COUNT(*) FROM people WHER age > 1"
        with pytest.raises(pgerr.SyntaxError) as info:
            c.execute(sql)
        diag = info.value.diag
        assert diag.message_primary == 'syntax error at or near "age"'
        assert diag.statement_position == str(sql.index(" age") + 2) and diag.message_hint == 'did you mean "WHERE"?'
        # several statements in one simple query: the position counts from the query string's start
        with pytest.raises(pgerr.SyntaxError) as info:
            c.execute("SHOW dpsql.epsilon; SELECT COUNT(*) FROM people GROUP")
        assert info.value.diag.statement_position == str(len("SHOW dpsql.epsilon; SELECT COUNT(*) FROM people ") + 1)
        for sql in ("SELECT COUNT(*) FROM people WHERE", "SELEC 1", "SELECT COUNT(* FROM people"):
            with pytest.raises(pgerr.SyntaxError) as info:
                c.execute(sql)
            text = f"{info.value.diag.message_primary} {info.value.diag.message_hint}"
            assert "sqlglot" not in text and "Required keyword" not in text and "Invalid expression" not in text


def test_cancel_is_query_canceled_on_both_sides(proxy, people_db):
    with psycopg.connect(proxy.dsn("slow"), autocommit=True) as c:
        threading.Timer(0.5, c.cancel_safe if hasattr(c, "cancel_safe") else c.cancel).start()
        with pytest.raises(pgerr.QueryCanceled) as wire:
            c.execute("SELECT COUNT(*) FROM people WHERE age > 21")
    with dpsql.connect(people_db, policy=proxy.backend.policy, analyst="slow") as conn:
        conn.session.engine = SlowEngine(conn.session.engine, SLOW_SECONDS)
        threading.Timer(0.5, conn.session.cancel).start()
        with pytest.raises(dpsql.QueryCanceled) as dbapi:
            conn.cursor().execute("SELECT COUNT(*) FROM people WHERE age > 21")
    assert wire.value.sqlstate == dbapi.value.sqlstate == "57014"
    assert pg_base(type(wire.value)) == dbapi.value.pep249_base().__name__ == "OperationalError"


def test_wire_only_kinds(proxy):
    """Errors only the proxy raises: a statement in an aborted transaction, a bad password."""
    with psycopg.connect(proxy.dsn()) as c:
        with pytest.raises(pgerr.SyntaxError):
            c.execute("SELEC 1")
        with pytest.raises(pgerr.InFailedSqlTransaction) as info:
            c.execute("SHOW dpsql.epsilon")
        assert pg_base(type(info.value)) == de.InFailedTransaction.pep249_base().__name__ == "InternalError"
        c.rollback()
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(proxy.dsn(password="wrong"))
    assert pg_base(type(info.value)) == de.AuthenticationFailed.pep249_base().__name__ == "OperationalError"
    assert info.value.sqlstate in (None, "28P01")
