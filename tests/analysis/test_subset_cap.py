"""The default subset cap and what a series is keyed by."""
from __future__ import annotations

import math

import sqlglot
from hypothesis import given
from hypothesis import strategies as st

from dpsql.analysis.reconstruction import (
    CAP_CEILING,
    CAP_FLOOR,
    auto_cap,
    classify,
    population_key,
)
from dpsql.policy import ColumnPolicy, TablePolicy

TABLE = TablePolicy("people", "person_id", columns={"age": ColumnPolicy("age", 0, 120),
                                                    "email": ColumnPolicy("email", identifier=True)})


def where(sql: str):
    return sqlglot.parse_one(f"SELECT 1 FROM people WHERE {sql}").args["where"].this


@given(st.integers(min_value=0, max_value=10**7))
def test_cap_is_bounded_monotone_and_a_quarter_of_the_information_bound(n):
    cap = auto_cap(n)
    assert CAP_FLOOR <= cap <= CAP_CEILING
    assert auto_cap(n + 1) >= cap
    if cap > CAP_FLOOR:
        # n bits from counts in 0..n need at least n / log2(n + 1) exact answers; allow a quarter
        assert cap <= n / math.log2(n + 1) / 4


def test_cap_values_and_unknown_populations():
    assert [auto_cap(n) for n in (1, 50, 100, 300, 500, 1000)] == [2, 2, 3, 9, 13, 16]
    assert auto_cap(None) == CAP_CEILING


def test_named_values_come_from_the_query_text():
    p = classify(where("person_id IN (1, 2, 3) AND age > 30"), TABLE)
    assert p.named == {"person_id=1", "person_id=2", "person_id=3"}
    assert classify(where("person_id = 1 OR email = 'a@b'"), TABLE).named == {"person_id=1", "email='a@b'"}
    assert classify(where("person_id BETWEEN 1 AND 9"), TABLE).named == frozenset()
    assert classify(where("age > 3"), TABLE).named == frozenset()


def test_population_key_ignores_the_identity_part_and_the_order():
    a = classify(where("person_id IN (1, 2) AND age > 30"), TABLE)
    b = classify(where("age > 30 AND person_id = 7"), TABLE)
    c = classify(where("age > 31 AND person_id = 7"), TABLE)
    assert population_key("people", ("SUM(income)", "COUNT(*)"), a) == \
        population_key("people", ("COUNT(*)", "SUM(income)"), b) == "people | COUNT(*), SUM(income) | age > 30"
    assert population_key("people", ("COUNT(*)",), a) != population_key("people", ("COUNT(*)",), c)
