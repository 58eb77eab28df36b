"""COUNT(DISTINCT col) of a non-unit column (dpsql.analysis.distinct): its noise spec and refusals."""
from __future__ import annotations

import math

import pytest

from dpsql.errors import QueryRejected
from dpsql.postprocess import Ref
from tests.analysis.test_quantile_analysis import plan


def test_count_distinct_column_is_a_count_with_the_row_bound():
    p = plan("SELECT kind, COUNT(DISTINCT state) AS n, COUNT(*) AS c FROM visits GROUP BY kind")
    dc, = p.distincts
    spec = next(s for s in p.noise if s.target == dc.name)
    assert spec.mechanism == "laplace" and spec.linf == 5 and p.l0 == 2
    assert spec.l1 == 10 and spec.l2 == pytest.approx(5 * math.sqrt(2)) and spec.epsilon == pytest.approx(0.5)
    assert p.outputs[1].expr == Ref(dc.name)


def test_count_distinct_unit_is_still_the_unit_count():
    p = plan("SELECT COUNT(DISTINCT person_id) AS n FROM visits")
    assert not p.distincts and p.measures[0].cap == 1


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(DISTINCT state) FILTER (WHERE cost > 3) FROM visits",
    "SELECT COUNT(DISTINCT cost + 1) FROM visits",
    "SELECT COUNT(DISTINCT visit_id) FROM visits",        # undeclared
    "SELECT SUM(DISTINCT cost) FROM visits",
])
def test_refusals(sql):
    with pytest.raises(QueryRejected):
        plan(sql)
