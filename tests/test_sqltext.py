"""The shared scanner: comment markers and ';' inside quotes are not what they seem."""
from __future__ import annotations

import pytest

from dpsql.sqltext import only_comments, skip, split_statements, strip_comments


@pytest.mark.parametrize("text, expected", [
    ("SELECT 1", "SELECT 1"),
    ("SELECT 'a--b' -- c\nFROM t", "SELECT 'a--b'  \nFROM t"),
    ("x /* c */ y", "x   y"),
    ("'it''s /* no */'", "'it''s /* no */'"),
    ('"a--b" - 1', '"a--b" - 1'),
    ("$$ -- kept $$ -- gone", "$$ -- kept $$  "),
    ("a /* open", "a  "),
    ("a - b / c", "a - b / c"),
])
def test_strip_comments(text, expected):
    assert strip_comments(text) == expected


def test_skip_reports_unterminated():
    assert skip("'abc", 0) == ("string", 4, False)
    assert skip("/* x", 0) == ("comment", 4, False)
    assert skip("x", 0) == ("code", 1, True)


def test_split_statements():
    assert split_statements("SELECT ';'; SELECT 2 -- ;\n;") == (["SELECT ';';", "SELECT 2 -- ;\n;"], "")
    assert split_statements("SELECT 'open;") == ([], "SELECT 'open;")
    assert only_comments(" -- x\n /* y */ ") and not only_comments("-- x\n1")


def test_a_collation_reported_with_a_type_is_read_and_stripped():
    """PostgreSQL's engine reports `text COLLATE "C"` for a column of a non-default collation: the
    analysis reads the collation, the proxy describes the column by the bare type."""
    from dpsql.frontends.pgwire.types import VARCHAR, pg_type
    from dpsql.sqltext import bare_type, collation
    assert collation('text COLLATE "C"') == '"C"' and bare_type('text COLLATE "C"') == "text"
    assert collation('character varying(5) COLLATE "de-x-icu"') == '"de-x-icu"'
    assert collation("character varying(5)") is None and bare_type("numeric(10,2)") == "numeric(10,2)"
    assert pg_type('character varying(5) COLLATE "de-x-icu"') is VARCHAR
    assert pg_type('text COLLATE "C"') is pg_type("text")
