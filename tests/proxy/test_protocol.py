"""The sans-IO protocol machine (dpsql.frontends.pgwire.protocol.Connection) driven by tables of
message sequences, with no socket, no Session and no thread: a fake application answers each
`Run` from a table, and the test reads the backend messages' types (one letter each, as the
protocol names them: T RowDescription, D DataRow, C CommandComplete, Z ReadyForQuery, E error...)."""
from __future__ import annotations

import pytest

from dpsql.errors import QueryRejected, SqlSyntaxError
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire.protocol import (
    DISCONNECT,
    FLUSH,
    Answer,
    Connection,
    Describe,
    Run,
    SendRows,
)
from dpsql.frontends.pgwire.statements import StatementKind, classify
from dpsql.frontends.pgwire.values import row_encoder
from tests.proxy import wire

INT8 = ("n", 20, 8, -1)
ONE = Answer([INT8], [(1,)], "SELECT 1")
THREE = Answer([INT8], [(1,), (2,), (3,)], "SELECT 3")
ANSWERS: dict[str, object] = {
    "SELECT 1": ONE,
    "SELECT 3": THREE,
    "SELECT COUNT(*) FROM t WHERE a > $1": ONE,
    "SELECT bad": lambda: SqlSyntaxError('syntax error at or near "bad"', position=8),   # a new error each time
    "SELECT secret FROM t": lambda: QueryRejected("a row-level query", "only aggregates are released"),
    "SET x = 1": Answer([], [], "SET", text_rows=True),
    "DEALLOCATE s1": Answer([], [], "DEALLOCATE", text_rows=True),
    "DISCARD ALL": Answer([], [], "DISCARD ALL", text_rows=True),
    "": Answer([], [], "", empty=True),
}


class App:
    """The I/O layer's part, faked: runs actions, records them, encodes rows."""

    def __init__(self, answers=None):
        self.answers = {**ANSWERS, **(answers or {})}
        self.actions: list = []
        self.out: list[tuple[str, bytes]] = []

    def perform(self, action):
        if action is FLUSH:
            return None
        if isinstance(action, Run):
            if action.kind.transaction_control:
                return Answer([], [], action.sql.split()[0].upper(), text_rows=True)
            got = self.answers[action.sql.strip().rstrip(";")]
            if callable(got):
                raise got()
            return got
        if isinstance(action, Describe):
            return [INT8] if action.kind is StatementKind.QUERY else []
        if isinstance(action, SendRows):
            encode = row_encoder([(f.type_oid, f.format) for f in action.fields])
            for row in action.answer.rows[action.start:action.stop]:
                self.out.extend(wire.parse_backend(encode(row)))
            return None
        raise AssertionError(action)

    def drive(self, conn: Connection, messages) -> str:
        """Feed the messages; the backend messages' types, '|' where the connection ends."""
        for msg in messages:
            outs = conn.receive_frame(*msg) if isinstance(msg, tuple) else conn.receive(msg)
            while outs:
                action = outs.pop() if not isinstance(outs[-1], bytes) else None
                for data in outs:
                    self.out.extend(wire.parse_backend(data))
                if action is None:
                    break
                self.actions.append(action)
                if action is DISCONNECT:
                    return self.types + "|"
                try:
                    result = self.perform(action)
                except Exception as err:
                    outs = conn.failed(action, err)
                else:
                    outs = conn.completed(action, result)
        return self.types

    @property
    def types(self) -> str:
        return "".join(kind for kind, _ in self.out)

    def ready(self) -> list[str]:
        """The transaction status of each ReadyForQuery, in order."""
        return [body.decode() for kind, body in self.out if kind == "Z"]

    def runs(self) -> list[Run]:
        return [a for a in self.actions if isinstance(a, Run)]


Q = codec.Query
S = codec.Sync()


def P(sql: str, name: str = "", oids: tuple[int, ...] = ()) -> codec.Parse:
    return codec.Parse(name, sql, oids)


def B(statement: str = "", params: tuple = (), portal: str = "", result_formats: tuple[int, ...] = ()) -> codec.Bind:
    return codec.Bind(portal, statement, (), tuple(None if p is None else str(p).encode() for p in params),
                      result_formats)


def E(portal: str = "", max_rows: int = 0) -> codec.Execute:
    return codec.Execute(portal, max_rows)


# (name, messages, backend message types, ReadyForQuery statuses)
CASES = [
    ("simple query", [Q("SELECT 1")], "TDCZ", ["I"]),
    ("simple query, three rows", [Q("SELECT 3")], "TDDDCZ", ["I"]),
    ("empty simple query", [Q("")], "IZ", ["I"]),
    ("only comments", [Q("-- nothing\n")], "IZ", ["I"]),
    ("two statements in one query", [Q("SELECT 1; SELECT 3")], "TDCTDDDCZ", ["I"]),
    ("an error stops the rest of the query", [Q("SELECT 1; SELECT bad; SELECT 3")], "TDCEZ", ["I"]),
    ("a refused query, then the next works", [Q("SELECT secret FROM t"), Q("SELECT 1")], "EZTDCZ", ["I", "I"]),
    ("housekeeping has no rows", [Q("SET x = 1")], "CZ", ["I"]),
    ("extended: parse, bind, describe, execute, sync",
     [P("SELECT 1"), B(), codec.Describe("P", ""), E(), S], "12TDCZ", ["I"]),
    ("extended: describe a statement",
     [P("SELECT COUNT(*) FROM t WHERE a > $1", "s1", (23,)), codec.Describe("S", "s1"), S], "1tTZ", ["I"]),
    ("extended: describe a statement without rows", [P("SET x = 1", "s1"), codec.Describe("S", "s1"), S],
     "1tnZ", ["I"]),
    ("extended: an empty statement", [P(""), B(), E(), S], "12IZ", ["I"]),
    ("extended: execute in pieces", [P("SELECT 3"), B(), E("", 2), E("", 2), S], "12DDsDCZ", ["I"]),
    ("error, then everything up to Sync is skipped",
     [P("SELECT 1"), B("nope"), E(), codec.Describe("P", ""), S, P("SELECT 1"), B(), E(), S], "1EZ12DCZ", ["I", "I"]),
    ("an error while running skips to Sync", [P("SELECT bad"), B(), E(), E(), S], "12EZ", ["I"]),
    ("a malformed message is an error of the statement", [("B", b"\0nope"), ("E", b"\0\0\0\0\0"), S], "EZ", ["I"]),
    ("a malformed Query is answered at once", [("Q", b"SELECT 1")], "EZ", ["I"]),
    ("duplicate prepared statement", [P("SELECT 1", "s1"), P("SELECT 1", "s1"), S], "1EZ", ["I"]),
    ("bind to an unknown portal name", [E("p9"), S], "EZ", ["I"]),
    ("close a statement, then bind to it fails",
     [P("SELECT 1", "s1"), codec.Close("S", "s1"), B("s1"), S], "13EZ", ["I"]),
    ("DEALLOCATE drops a statement", [P("SELECT 1", "s1"), S, Q("DEALLOCATE s1"), B("s1"), S],
     "1ZCZEZ", ["I", "I", "I"]),
    ("transaction status: T in a block, I after COMMIT",
     [Q("BEGIN"), Q("SELECT 1"), Q("COMMIT")], "CZTDCZCZ", ["T", "T", "I"]),
    ("transaction status: an error fails the block, which refuses all but its end",
     [Q("BEGIN"), Q("SELECT bad"), Q("SELECT 1"), Q("COMMIT"), Q("SELECT 1")], "CZEZEZCZTDCZ", ["T", "E", "E", "I", "I"]),
    ("ROLLBACK TO stays in the block", [Q("BEGIN"), Q("SELECT bad"), Q("ROLLBACK TO s"), Q("ROLLBACK")],
     "CZEZCZCZ", ["T", "E", "T", "I"]),
    ("extended: an error in a block is reported at Sync as E; Execute then refuses",
     [Q("BEGIN"), P("SELECT bad"), B(), E(), S, P("SELECT 1"), B(), E(), S], "CZ12EZ12EZ", ["T", "E", "E"]),
    ("unknown message type", [codec.Unknown("!", b"x"), Q("SELECT 1")], "E|", []),
    ("password message after login", [codec.Password(b"x")], "E|", []),
    ("terminate", [codec.Terminate(), Q("SELECT 1")], "|", []),
    ("COPY (query) TO STDOUT", [Q("COPY (SELECT 1) TO STDOUT")], "HdcCZ", ["I"]),
    ("COPY of a table is refused", [Q("COPY t TO STDOUT")], "EZ", ["I"]),
    ("DISCARD ALL drops the named statements",
     [P("SELECT 1", "s1"), S, Q("DISCARD ALL"), B("s1"), S], "1ZCZEZ", ["I", "I", "I"]),
    ("flush sends without ending the statement", [P("SELECT 1"), codec.Flush(), B(), E(), S], "12DCZ", ["I"]),
]


@pytest.mark.parametrize("name, messages, types, statuses", CASES, ids=[c[0] for c in CASES])
def test_message_sequences(name, messages, types, statuses):
    app = App()
    assert app.drive(Connection(), messages) == types
    assert app.ready() == statuses


def test_prepared_statement_reuse_binds_new_parameters():
    app, conn = App(), Connection()
    sql = "SELECT COUNT(*) FROM t WHERE a > $1"
    app.drive(conn, [P(sql, "s1", (23,)), S, B("s1", (30,)), E(), S, B("s1", (40,)), E(), S])
    assert app.types == "1Z2DCZ2DCZ"
    assert [r.params for r in app.runs()] == [[30], [40]]
    assert all(r.session_sql == "SELECT COUNT(*) FROM t WHERE a > :p1" for r in app.runs())
    assert "s1" in conn.statements and conn.portals == {}        # portals end with the transaction


def test_parameter_types_come_from_the_tables_when_not_declared():
    app = App()
    conn = Connection(tables=lambda: {"t": {"a": "INTEGER"}})
    app.drive(conn, [P("SELECT COUNT(*) FROM t WHERE a > $1", "s1"), codec.Describe("S", "s1"), S,
                     B("s1", (30,)), E(), S])
    describe = next(a for a in app.actions if isinstance(a, Describe))
    assert describe.param_oids == [23]
    assert app.runs()[0].params == [30]             # decoded as an integer, not text


def test_a_portal_runs_once_for_describe_and_execute():
    app = App()
    app.drive(Connection(), [P("SELECT 1"), B(), codec.Describe("P", ""), E(), S])
    assert len(app.runs()) == 1


def test_binary_result_formats_reach_the_rows():
    app = App()
    app.drive(Connection(), [P("SELECT 1"), B(result_formats=(1,)), E(), S])
    rows = [a for a in app.actions if isinstance(a, SendRows)]
    assert [f.format for f in rows[0].fields] == [1]
    assert dict(app.out)["D"] == b"\x00\x01\x00\x00\x00\x08" + (1).to_bytes(8, "big")


def test_error_position_counts_from_the_start_of_the_query_string():
    app = App()
    app.drive(Connection(), [Q("SELECT 1; SELECT bad")])
    error = dict(app.out)["E"]
    fields = dict((f[:1].decode(), f[1:].decode()) for f in error.split(b"\0") if f)
    assert fields["C"] == "42601" and fields["P"] == str(8 + len("SELECT 1; "))


def test_the_simple_query_clears_the_unnamed_statement_and_portal():
    app, conn = App(), Connection()
    app.drive(conn, [P("SELECT 1"), B(), Q("SELECT 3")])
    assert "" not in conn.statements and "" not in conn.portals


def test_the_pending_action_must_be_reported_before_the_next_message():
    conn = Connection()
    out = conn.receive(Q("SELECT 1"))
    run = out[-1]
    assert isinstance(run, Run) and conn.pending is run
    with pytest.raises(RuntimeError):
        conn.receive(Q("SELECT 1"))
    with pytest.raises(RuntimeError):
        conn.completed(Run("SELECT 1", None, "SELECT 1", StatementKind.QUERY), ONE)
    rest = conn.completed(run, Answer([INT8], [], "SELECT 0"))
    assert [kind for kind, _ in wire.parse_backend(b"".join(o for o in rest if isinstance(o, bytes)))] == \
        ["T", "C", "Z"]
    assert rest[-1] is FLUSH


def test_fatal_framing_error_ends_the_connection():
    conn = Connection()
    out = conn.fatal(QueryRejected("x", "y"))
    assert out[-1] is DISCONNECT
    fields = wire.parse_backend(out[0])[0][1]
    assert b"SFATAL" in fields


@pytest.mark.parametrize("sql, kind", [
    ("SELECT 1", StatementKind.QUERY), ("  (select 1)", StatementKind.QUERY), ("with x as (select 1) select 1",
                                                                                StatementKind.QUERY),
    ("/* c */ begin", StatementKind.BEGIN), ("START TRANSACTION", StatementKind.BEGIN),
    ("end", StatementKind.COMMIT), ("COMMIT", StatementKind.COMMIT), ("abort", StatementKind.ROLLBACK),
    ("ROLLBACK", StatementKind.ROLLBACK), ("rollback to savepoint a", StatementKind.ROLLBACK_TO),
    ("ROLLBACK WORK TO a", StatementKind.ROLLBACK_TO), ("SAVEPOINT a", StatementKind.SAVEPOINT),
    ("release a", StatementKind.RELEASE), ("SET dpsql.epsilon = 1", StatementKind.SET),
    ("show all", StatementKind.SHOW), ("RESET ALL", StatementKind.RESET), ("DISCARD ALL", StatementKind.DISCARD),
    ("DEALLOCATE s1", StatementKind.DEALLOCATE), ("COPY (SELECT 1) TO STDOUT", StatementKind.COPY),
    ("EXPLAIN DP SELECT 1", StatementKind.OTHER), ("", StatementKind.EMPTY), ("-- only\n", StatementKind.EMPTY),
    ("$1", StatementKind.EMPTY),
])
def test_classify(sql, kind):
    assert classify(sql) is kind


def test_housekeeping_kinds_take_no_query_slot():
    housekeeping = {k for k in StatementKind if k.housekeeping}
    assert housekeeping == {StatementKind.BEGIN, StatementKind.COMMIT, StatementKind.ROLLBACK,
                            StatementKind.ROLLBACK_TO, StatementKind.SAVEPOINT, StatementKind.RELEASE,
                            StatementKind.SET, StatementKind.RESET, StatementKind.SHOW, StatementKind.DISCARD,
                            StatementKind.DEALLOCATE}
