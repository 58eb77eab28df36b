"""The DB-API's accuracy surface: SET dpsql.intervals, SET dpsql.round, cur.accuracy of derived
columns, cur.suppressed, EXPLAIN DP's forms (issue 16, "Accuracy wherever the numbers go")."""
from __future__ import annotations

import math

import pytest

import dpsql
from dpsql.errors import InvalidSetting
from tests.conftest import policy_for


@pytest.fixture
def conn(people_db, tmp_path):
    with dpsql.connect(people_db, policy=policy_for(tmp_path), analyst="alice") as c:
        yield c


def test_intervals_add_low_and_high_after_each_noisy_column(conn):
    cur = conn.cursor()
    assert cur.execute("SHOW dpsql.intervals").fetchone() == ("off",)
    cur.execute("SET dpsql.intervals = on")
    assert cur.execute("SHOW dpsql.intervals").fetchone() == ("on",)
    cur.execute("SELECT state, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY state ORDER BY state")
    assert [d[0] for d in cur.description] == ["state", "n", "n_low", "n_high", "a", "a_low", "a_high"]
    rows, widths = cur.fetchall(), cur.half_widths
    assert len(rows) == 8
    for row, hw in zip(rows, widths):
        _, n, n_lo, n_hi, a, a_lo, a_hi = row
        assert n_lo == pytest.approx(n - hw[1]) and n_hi == pytest.approx(n + hw[1])
        assert a_lo == pytest.approx(a - hw[4]) and a_hi == pytest.approx(a + hw[4]) and a_lo < a < a_hi
    assert cur.accuracy[2] is None and cur.accuracy[1].ci95 == pytest.approx(widths[0][1])
    # the wire protocol's Describe sees the same columns
    names, types = conn.session.describe("SELECT state, COUNT(*) AS n FROM people GROUP BY state")
    assert names == ["state", "n", "n_low", "n_high"] and types[1:] == ["DOUBLE"] * 3
    cur.execute("RESET dpsql.intervals")
    cur.execute("SELECT COUNT(*) AS n FROM people")
    assert [d[0] for d in cur.description] == ["n"]


def test_avg_and_arithmetic_have_half_widths(conn):
    cur = conn.cursor()
    cur.execute("SELECT AVG(age) AS a, SUM(income) / COUNT(*) AS r, COUNT(*) - COUNT(age) AS d FROM people")
    for acc, hw in zip(cur.accuracy, cur.half_widths[0]):
        assert acc is not None and acc.noise_scale is None
        assert acc.ci95 is not None and math.isfinite(acc.ci95) and acc.ci95 > 0 and acc.ci95 == hw


def test_round_gives_whole_counts_clamped_at_zero(conn):
    cur = conn.cursor()
    # nobody is over 200: the true count is 0, so about half the noisy counts are negative
    cur.execute("SELECT COUNT(*) AS n FROM people WHERE age > 200")
    raw = cur.fetchone()[0]
    assert isinstance(raw, float)
    cur.execute("SET dpsql.round = on")
    assert cur.execute("SHOW dpsql.round").fetchone() == ("on",)
    for _ in range(6):
        cur.execute("SELECT COUNT(*) AS n, SUM(age) AS s FROM people WHERE age > 200")
        n, s = cur.fetchone()
        assert isinstance(n, int) and n >= 0 and isinstance(s, float)
        assert math.copysign(1.0, s) > 0 or s != 0           # never -0.0
    cur.execute("SET dpsql.round = off")
    cur.execute("SELECT COUNT(*) AS n FROM people")
    assert isinstance(cur.fetchone()[0], float)
    with pytest.raises(InvalidSetting):
        cur.execute("SET dpsql.round = maybe")


def test_suppressed_is_zero_for_public_domains_and_not_released_after_selection(conn):
    cur = conn.cursor()
    cur.execute("SELECT state, COUNT(*) FROM people GROUP BY state")
    assert cur.suppressed == 0 and "suppressed" not in cur.statusmessage
    cur.execute("SELECT COUNT(*) FROM people")
    assert cur.suppressed == 0
    cur.execute("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
    assert cur.suppressed is None
    status = cur.statusmessage
    assert "partition selection may have suppressed groups" in status and "not released" in status
    # the note carries no number of groups
    note = status.split("partition selection", 1)[1]
    assert not any(ch.isdigit() for ch in note)


def test_explain_dp_has_one_row_per_fact_in_every_form(conn):
    cur = conn.cursor()
    cur.execute("EXPLAIN DP SELECT state, COUNT(*) FROM people GROUP BY state")
    assert [d[0] for d in cur.description] == ["fact", "value"]
    rows = cur.fetchall()
    facts = [f for f, _ in rows if f]
    assert facts[0] == "value: COUNT(*)" and "charge: total" in facts and "bounding" in facts
    assert all(len(v) <= 200 for _, v in rows)
    sql_at = [f for f, _ in rows].index("rewritten_sql")
    assert len(rows) - sql_at > 3                        # pretty-printed over several rows
    wide = {r[0]: r for r in cur.execute("EXPLAIN DP (WIDE) SELECT state, COUNT(*) FROM people GROUP BY state")}
    assert len(cur.description) == 11 and wide["charge"][4] == 0.5
    assert "epsilon 0.5" in {f: v for f, v in rows if f}["charge: total"]
    lines = [r[0] for r in cur.execute("EXPLAIN DP (SQL) SELECT COUNT(*) FROM people").fetchall()]
    assert [d[0] for d in cur.description] == ["rewritten_sql"] and lines[0] == "SELECT" and len(lines) > 2


def test_repl_status_line_reports_suppression_and_intervals(people_db, tmp_path):
    """The REPL prints Result.status: the suppression note with no number, and interval columns."""
    import io

    from prompt_toolkit.input import create_pipe_input

    from dpsql.frontends import repl
    from dpsql.session import Session
    with Session.open(people_db, policy_for(tmp_path), "alice") as s:
        out = io.StringIO()
        with create_pipe_input() as inp:
            inp.send_text("SET dpsql.intervals = on;\rSET dpsql.round = on;\r"
                          "SELECT visit_date, COUNT(*) AS n FROM visits GROUP BY visit_date;\r\x04")
            rc = repl.run(s, input=inp, output=out)
    flat = " ".join(out.getvalue().split())
    assert rc == 0 and "n_low" in flat and "n_high" in flat
    assert "partition selection may have suppressed groups with too few people" in flat
    assert "-0 " not in flat


def test_rendered_values_never_show_negative_zero():
    from dpsql.frontends.render import format_value
    assert format_value(-0.3, 17.9) == "0 ±18"
    assert format_value(-0.0, None) == "0" and format_value(-0.004, 0.5) == "0.00 ±0.50"
    assert format_value(-3.4, 17.9) == "-3 ±18"


def test_show_all_in_the_dbapi_lists_dpsql_settings(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.round = on")
    rows = {name: (value, desc) for name, value, desc in cur.execute("SHOW ALL").fetchall()}
    assert [d[0] for d in cur.description] == ["name", "setting", "description"]
    assert rows["dpsql.round"][0] == "on" and rows["dpsql.intervals"][0] == "off"
    assert all(desc for _, desc in rows.values())
