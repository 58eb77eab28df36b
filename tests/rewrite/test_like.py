"""LIKE on Spark as an RLIKE that cannot backtrack into a % (dpsql.rewrite.like): it matches exactly
what LIKE matches, and the rewrite sends it for LIKE, NOT LIKE, ILIKE and NOT ILIKE.

The reference is LIKE itself (a backtracking regex over a whole string, fine on short strings);
the regex under test is read by Python's re, which has java.util.regex's atomic groups (3.11+)."""
from __future__ import annotations

import random
import re

import pytest
from sqlglot import exp

from dpsql.rewrite import to_sql
from dpsql.rewrite.like import like_regex
from tests.analysis.test_totality import plan


def _like(text: str, pattern: str, escape: str = "\\") -> bool:
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
            continue
        out += ".*" if ch == "%" else "." if ch == "_" else re.escape(ch)
        i += 1
    return re.fullmatch(out, text, re.DOTALL) is not None


def _rlike(text: str, pattern: str) -> bool:
    regex = like_regex(pattern).replace("\\z", "\\Z")
    regex = re.sub(r"\\x\{([0-9A-F]+)\}", lambda m: re.escape(chr(int(m.group(1), 16))), regex)
    return re.search(regex, text) is not None


def test_the_regex_matches_exactly_what_like_matches():
    rnd = random.Random(12)
    for _ in range(50_000):
        pattern = "".join(rnd.choice("ab%_") for _ in range(rnd.randint(0, 7)))
        if rnd.random() < 0.3:
            pattern += "\\" + rnd.choice("%_\\") + rnd.choice(["", "a", "%"])
        text = "".join(rnd.choice("ab%_\\\né") for _ in range(rnd.randint(0, 8)))
        assert _rlike(text, pattern) == _like(text, pattern), (text, pattern, like_regex(pattern))


@pytest.mark.parametrize("pattern, regex", [
    ("abc", r"(?s)\Aabc\z"), ("", r"(?s)\A\z"), ("%%%", r"(?s)\A.*\z"),
    ("%a%b_\\%c%", r"(?s)\A(?>.*?a)(?>.*?b.\x{25}c).*\z"), ("é%😀", r"(?s)\A\x{E9}.*\x{1F600}\z"),
])
def test_regex_shape(pattern, regex):
    assert like_regex(pattern) == regex


def test_spark_sends_rlike_for_every_like_form_and_other_engines_like():
    p = plan("s LIKE '%a%b' AND NOT s ILIKE 'İ%' AND s NOT LIKE '_' AND s NOT ILIKE '%X%'", "spark")
    sql = to_sql(p, "spark")
    assert "LIKE" not in sql.replace("RLIKE", "") and sql.count("RLIKE") == 4
    assert sql.count("LOWER(x.s) RLIKE") == 2
    assert sql.count("NOT x.s RLIKE") + sql.count("NOT LOWER(x.s) RLIKE") == 3
    for where in ("s LIKE '%%%x'", "s NOT ILIKE '%a%b'", "(s LIKE 'a')"):            # the WHERE is the LIKE
        sql = to_sql(plan(where, "spark"), "spark")
        assert "RLIKE" in sql and "LIKE" not in sql.replace("RLIKE", ""), sql
    for dialect in ("duckdb", "postgres"):
        assert "RLIKE" not in to_sql(plan("s LIKE '%a%b'", dialect), dialect)
    assert isinstance(p.where.find(exp.Escape), exp.Escape)             # the plan itself keeps LIKE
