"""The sans-IO codec and SCRAM, with bytes only (no sockets)."""
from __future__ import annotations

import base64
import datetime as dt
import struct
from decimal import Decimal

import pytest

from dpsql.errors import (
    AuthenticationFailed,
    InvalidBinaryRepresentation,
    InvalidTextRepresentation,
    NotSupportedError,
    ProgramLimitExceeded,
    ProtocolViolation,
)
from dpsql.frontends.pgwire import codec
from dpsql.frontends.pgwire import values as pgvalues
from dpsql.frontends.pgwire.auth import (
    ScramServer,
    make_verifier,
    parse_verifier,
)
from dpsql.frontends.pgwire.types import infer_param_oids, param_count, pg_type
from tests.proxy import wire
from tests.proxy.wire import ScramClient


def test_startup_message_round_trip():
    raw = wire.startup_message({"user": "alice", "database": "test"})
    n = codec.startup_length(raw[:4])
    msg = codec.parse_startup(raw[4:4 + n])
    assert msg == codec.Startup(3, 0, {"user": "alice", "database": "test"})


@pytest.mark.parametrize("code, cls", [(codec.SSL_REQUEST, codec.SSLRequest), (codec.GSSENC_REQUEST, codec.GSSENCRequest)])
def test_ssl_and_gssenc_requests(code, cls):
    assert isinstance(codec.parse_startup(struct.pack("!i", code)), cls)


def test_cancel_request():
    assert codec.parse_startup(struct.pack("!iii", codec.CANCEL_REQUEST, 42, -7)) == codec.CancelRequest(42, -7)


def test_protocol_2_is_refused_with_0A000():
    with pytest.raises(NotSupportedError, match="unsupported frontend protocol 2.0") as err:
        codec.parse_startup(struct.pack("!i", 2 << 16) + b"user\0a\0\0")
    assert err.value.sqlstate == "0A000"


@pytest.mark.parametrize("head", [b"\0\0\0\0", b"\0\0\0\x07", b"GET ", b"\x7f\xff\xff\xff"])
def test_absurd_startup_lengths(head):
    with pytest.raises(ProtocolViolation):
        codec.startup_length(head)


def test_decoder_frames_split_and_joined_messages():
    d = codec.Decoder()
    stream = wire.query_message("SELECT 1") + wire.frontend("S") + wire.frontend("X")
    for i in range(len(stream)):          # one byte at a time
        d.feed(stream[i:i + 1])
    out = []
    while (m := d.next()) is not None:
        out.append(m)
    assert [k for k, _ in out] == ["Q", "S", "X"]
    assert codec.parse_message(*out[0]) == codec.Query("SELECT 1")


def test_decoder_refuses_oversized_and_negative_lengths():
    d = codec.Decoder(max_message_bytes=1024)
    d.feed(b"Q" + struct.pack("!i", 5000))
    with pytest.raises(ProgramLimitExceeded, match="exceeds the limit") as err:
        d.next()
    assert err.value.sqlstate == "54000"
    d = codec.Decoder()
    d.feed(b"Q" + struct.pack("!i", 2))
    with pytest.raises(ProtocolViolation):
        d.next()


def _bind(portal=b"", stmt=b"s1", fmts=(1,), params=(b"\0\0\0\x1e", None), results=(1,)):
    body = portal + b"\0" + stmt + b"\0" + struct.pack("!h", len(fmts)) + b"".join(struct.pack("!h", f) for f in fmts)
    body += struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    body += struct.pack("!h", len(results)) + b"".join(struct.pack("!h", f) for f in results)
    return body


def test_extended_messages_parse():
    assert codec.parse_message("P", b"s1\0SELECT $1\0" + struct.pack("!hI", 1, 23)) == \
        codec.Parse("s1", "SELECT $1", (23,))
    assert codec.parse_message("B", _bind()) == codec.Bind("", "s1", (1,), (b"\0\0\0\x1e", None), (1,))
    assert codec.parse_message("D", b"Pp\0") == codec.Describe("P", "p")
    assert codec.parse_message("C", b"Ss1\0") == codec.Close("S", "s1")
    assert codec.parse_message("E", b"\0" + struct.pack("!i", 10)) == codec.Execute("", 10)
    assert isinstance(codec.parse_message("H", b""), codec.Flush)
    assert isinstance(codec.parse_message("Z", b""), codec.Unknown)


@pytest.mark.parametrize("kind, body", [
    ("Q", b"SELECT 1"),                       # no terminator
    ("Q", b"SELECT 1\0extra"),                # bytes after the fields
    ("P", b"s1\0SELECT 1\0\0\x05"),           # 5 oids promised, none given
    ("B", _bind()[:-3]),                      # truncated
    ("B", _bind(fmts=(7,))),                  # unknown format code
    ("D", b"X\0"),                            # bad subtype
    ("E", b"\0\0"),                           # short
    ("S", b"x"),
    ("Q", b"\xff\xfe\0"),                     # not UTF-8
])
def test_malformed_bodies_are_protocol_violations(kind, body):
    with pytest.raises(ProtocolViolation):
        codec.parse_message(kind, body)


def test_backend_messages():
    fields = [codec.Field("n", 701, 8), codec.Field("s", 25, -1, format=1)]
    raw = codec.row_description(fields) + codec.data_row([b"1.5", None]) + codec.command_complete("SELECT 1") \
        + codec.ready_for_query("T")
    msgs = wire.parse_backend(raw)
    assert [k for k, _ in msgs] == ["T", "D", "C", "Z"]
    assert msgs[0][1][:2] == b"\0\x02" and b"n\0" in msgs[0][1]
    assert msgs[1][1] == b"\0\x02\0\0\0\x031.5\xff\xff\xff\xff"
    assert msgs[2][1] == b"SELECT 1\0"
    assert msgs[3][1] == b"T"
    err = wire.parse_backend(codec.error_response({"S": "ERROR", "C": "42501", "M": "no"}))[0]
    assert err == ("E", b"SERROR\0C42501\0Mno\0\0")


@pytest.mark.parametrize("value, text", [
    (1.0, "1"), (0.1, "0.1"), (-2.5, "-2.5"), (1e16, "1e+16"), (1.5e-05, "1.5e-05"), (123456789.125, "123456789.125"),
    (float("inf"), "Infinity"), (float("nan"), "NaN"), (True, "t"), (False, "f"), (7, "7"),
    (Decimal("1.50"), "1.50"), (Decimal("1E+3"), "1000"), (dt.date(2024, 2, 29), "2024-02-29"),
    (dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02 03:04:05"), ("héllo", "héllo"),
])
def test_text_format(value, text):
    assert pgvalues.format_text(value) == text
    assert pgvalues.encode_value(value, 25, 0) == text.encode()


def test_float_text_round_trips():
    for v in (0.1 + 0.2, 1 / 3, 1997.9344864239783, 2.0 ** 60, 5e-324, -1.7976931348623157e308):
        assert float(pgvalues.format_float(v)) == v


@pytest.mark.parametrize("value, oid", [
    (1, 21), (-70000, 23), (2**62, 20), (1.5, 700), (0.1, 701), (True, 16), ("text", 25), ("v", 1043),
    (dt.date(1999, 12, 31), 1082), (dt.datetime(2024, 5, 6, 7, 8, 9, 123456), 1114),
])
def test_binary_round_trip(value, oid):
    raw = pgvalues.encode_value(value, oid, 1)
    assert pgvalues.decode_param(raw, oid, 1) == value


_ROW_VALUES = [None, 0, -7, 2**62, True, False, 0.0, -0.0, 0.1, 1e16, 1.5e-05, float("inf"), float("nan"), 3.0,
               Decimal("1.50"), Decimal("-0.001"), "héllo", "", dt.date(2024, 2, 29), dt.datetime(2024, 1, 2, 3, 4, 5),
               dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.timedelta(days=2, seconds=5), b"\x00\xff"]


@pytest.mark.parametrize("fmt", [0, 1])
@pytest.mark.parametrize("oid", [20, 21, 23, 700, 701, 16, 1700, 25, 1043, 1082, 1114, 1184, 1186, 17])
def test_row_encoder_is_data_row_of_encode_value(oid, fmt):
    """The per-column row encoder the server sends results with writes exactly what encoding
    each value on its own does, for every value that one can encode (and None)."""
    import numpy as np
    values = _ROW_VALUES + [np.float64(2.5), np.int64(-3)]
    cases = []
    for v in values:
        try:
            cases.append((v, pgvalues.encode_value(v, oid, fmt)))
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error, ArithmeticError):
            continue                        # not a value of this type: the server never meets it
    assert len(cases) >= 2                 # None and at least one value of the type
    encode = pgvalues.row_encoder([(oid, fmt), (25, 0), (oid, fmt)])
    for v, want in cases:
        assert encode((v, "x", v)) == codec.data_row([want, b"x", want]), (v, oid, fmt)


@pytest.mark.parametrize("text", ["0", "1", "-1", "0.0001", "12345.6789", "-98765432109876543210.00012", "1.50",
                                  "10000", "0.00", "999999999999.999999", "NaN", "100000000"])
def test_numeric_binary_round_trip(text):
    d = Decimal(text)
    back = pgvalues.decode_numeric(pgvalues.encode_numeric(d))
    assert (back.is_nan() and d.is_nan()) or (back == d and str(back) == str(d))


def test_numeric_binary_layout():
    # 12345.678: digits 1 2345 6780, weight 1, dscale 3 (as PostgreSQL's numeric_send)
    assert pgvalues.encode_numeric(Decimal("12345.678")) == struct.pack("!hhHh3H", 3, 1, 0, 3, 1, 2345, 6780)
    assert pgvalues.encode_numeric(Decimal("-0.05")) == struct.pack("!hhHh1H", 1, -1, 0x4000, 2, 500)


def test_text_params_decode_by_oid():
    assert pgvalues.decode_param(b"30", 23, 0) == 30
    assert pgvalues.decode_param(b"2.5", 701, 0) == 2.5
    assert pgvalues.decode_param(b"1.10", 1700, 0) == Decimal("1.10")
    assert pgvalues.decode_param(b"true", 16, 0) is True
    assert pgvalues.decode_param(b"2024-01-02", 1082, 0) == dt.date(2024, 1, 2)
    assert pgvalues.decode_param(b"CA", 0, 0) == "CA"
    assert pgvalues.decode_param(None, 23, 0) is None
    with pytest.raises(InvalidTextRepresentation) as err:
        pgvalues.decode_param(b"thirty", 23, 0)
    assert err.value.sqlstate == "22P02"
    with pytest.raises(InvalidBinaryRepresentation) as err:
        pgvalues.decode_param(b"\0\0", 23, 1)
    assert err.value.sqlstate == "22P03"


def test_catalog_text_to_binary():
    assert pgvalues.text_to_binary("42", 23) == struct.pack("!i", 42)
    assert pgvalues.text_to_binary("t", 16) == b"\x01"
    assert pgvalues.text_to_binary(None, 23) is None


def test_pg_type_names():
    assert pg_type("DECIMAL(18,3)").oid == 1700
    assert pg_type("double precision").oid == 701
    assert pg_type("BIGINT").oid == 20
    assert pg_type("MAP(VARCHAR, INTEGER)").oid == 25


def test_param_inference():
    tables = {"people": {"age": "INTEGER", "state": "VARCHAR", "income": "DOUBLE"}}
    sql = "SELECT COUNT(*) FROM people WHERE age > $1 AND state = $2 AND income BETWEEN $3 AND $4 LIMIT $5"
    assert infer_param_oids(sql, [], tables) == [23, 1043, 701, 701, 20]
    assert infer_param_oids(sql, [20, 25], tables)[:2] == [20, 25]
    assert param_count("SELECT '$1', $2 -- $9") == 2
    assert infer_param_oids("not sql at all $1", [], tables) == [25]


# -- SCRAM ------------------------------------------------------------------------------------------

RFC7677 = {
    "password": "pencil", "salt": "W22ZaJ0SNY7soEsUEjb6gQ==", "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def test_scram_rfc7677_vector():
    v = make_verifier(RFC7677["password"], salt=base64.b64decode(RFC7677["salt"]))
    s = ScramServer(v, "user", nonce=RFC7677["server_nonce"])
    assert s.first(RFC7677["client_first"]) == RFC7677["server_first"]
    assert s.final(RFC7677["client_final"]) == RFC7677["server_final"]


def test_scram_client_against_server_and_wrong_password():
    v = make_verifier("right")
    assert parse_verifier(v)[0] == 4096
    c, s = ScramClient("right"), ScramServer(v, "alice")
    assert c.verify(s.final(c.final(s.first(c.first()))))
    c, s = ScramClient("wrong"), ScramServer(v, "alice")
    with pytest.raises(AuthenticationFailed, match='password authentication failed for user "alice"'):
        s.final(c.final(s.first(c.first())))


def test_scram_unknown_user_fails_like_a_wrong_password():
    c, s = ScramClient("anything"), ScramServer(None, "mallory")
    first = s.first(c.first())
    assert b",i=4096" in first and b",s=" in first          # a plausible salt and iteration count
    with pytest.raises(AuthenticationFailed) as err:
        s.final(c.final(first))
    assert err.value.sqlstate == "28P01"
    # the mock salt is stable per name, as a real one would be
    again = ScramServer(None, "mallory").first(ScramClient("x").first())
    assert again.split(b",")[1] == first.split(b",")[1]


@pytest.mark.parametrize("client_first", [b"p=tls-server-end-point,,n=,r=abc", b"garbage", b"n,,n=,", b"\xff"])
def test_scram_malformed_client_first(client_first):
    with pytest.raises(ProtocolViolation):
        ScramServer(make_verifier("x"), "a").first(client_first)


def test_scram_tampered_nonce():
    v = make_verifier("pw")
    c, s = ScramClient("pw"), ScramServer(v, "a")
    final = c.final(s.first(c.first())).replace(b"r=", b"r=X", 1)
    with pytest.raises(ProtocolViolation):
        s.final(final)


def test_param_casts_are_dropped_and_typed():
    from dpsql.frontends.pgwire.types import strip_param_casts
    sql, types = strip_param_casts("SELECT COUNT(*) FROM people WHERE age > $1::INTEGER AND s = $2::varchar(2) "
                                   "AND x = $3::double precision AND y = $4::regclass AND z = '$5::int'")
    assert sql == ("SELECT COUNT(*) FROM people WHERE age > $1 AND s = $2 AND x = $3 AND y = $4::regclass "
                   "AND z = '$5::int'")
    assert types == {1: 23, 2: 1043, 3: 701}
