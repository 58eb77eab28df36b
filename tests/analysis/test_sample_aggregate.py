"""Sample-and-aggregate in the analysis: the policy must allow each function, ranges are derived
or declared, the sensitivity is L0 (hi - lo) / k, and EXPLAIN DP names k and the range."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.parse import classify
from dpsql.datagen import demo_policy
from dpsql.errors import PolicyError, QueryRejected
from dpsql.policy import load_policy

_PEOPLE = {"person_id": "BIGINT", "age": "INTEGER", "income": "DOUBLE", "state": "VARCHAR", "sex": "VARCHAR",
           "education": "VARCHAR"}
_VISITS = {"visit_id": "BIGINT", "person_id": "BIGINT", "visit_date": "DATE", "state": "VARCHAR",
           "cost": "DOUBLE", "kind": "VARCHAR"}
SCHEMA = Schema({"people": _PEOPLE, "visits": _VISITS}, frozenset(), frozenset({"people", "visits"}))


def _policy(functions=None):
    pol = demo_policy(ledger="unused.sqlite")
    if functions is not None:
        pol["functions"] = functions
    return load_policy(pol)


ALLOW = {"sample_aggregate": ["corr", "covar_pop", "covar_samp", "regr_slope"], "blocks": 10,
         "regr_slope": {"lower": -100, "upper": 1000}}


def _plan(sql, functions=ALLOW, dialect="duckdb"):
    return analyze(classify(sql).tree, _policy(functions), SCHEMA, Settings(1.0, 1e-8, "laplace"), dialect)


@pytest.mark.parametrize("sql", ["SELECT CORR(age, income) FROM people",
                                 "SELECT REGR_SLOPE(income, age) FROM people",
                                 "SELECT COVAR_POP(age, income) FROM people"])
def test_refused_without_policy_permission(sql):
    with pytest.raises(QueryRejected, match="policy does not allow it through sample-and-aggregate") as err:
        _plan(sql, None)
    assert "[functions] sample_aggregate" in err.value.hint


def test_refused_when_not_listed():
    with pytest.raises(QueryRejected, match="REGR_INTERCEPT"):
        _plan("SELECT REGR_INTERCEPT(income, age) FROM people")


def test_regr_needs_a_declared_range():
    f = {"sample_aggregate": ["regr_slope"]}
    with pytest.raises(QueryRejected, match="no range that follows"):
        _plan("SELECT REGR_SLOPE(income, age) FROM people", f)


def test_unbounded_argument_refused():
    with pytest.raises(QueryRejected, match="not declared|no declared bounds"):
        _plan("SELECT CORR(age, visit_id) FROM visits JOIN people USING (person_id)")


def test_mixing_with_other_aggregates_refused():
    with pytest.raises(QueryRejected, match="beside other aggregates"):
        _plan("SELECT COUNT(*), CORR(age, income) FROM people")


def test_corr_range_and_sensitivity():
    plan = _plan("SELECT CORR(age, income) AS c FROM people")
    m, spec = plan.measures[0], plan.noise[0]
    assert m.kind == "sample" and (m.lo, m.hi) == (-1, 1) and m.sample.blocks == 10
    assert spec.linf == pytest.approx(0.2) and spec.l1 >= 0.2
    assert plan.outputs[0].expr == ("clamp", ("ref", m.name), -1.0, 1.0)


def test_covariance_ranges_derived_from_bounds():
    plan = _plan("SELECT COVAR_POP(age, income) FROM people")
    m = plan.measures[0]
    w = Fraction(120 * 500000, 4)       # demo bounds: age [0, 120], income [0, 500000]
    assert (m.lo, m.hi) == (-w, w)
    plan = _plan("SELECT COVAR_SAMP(age, income) FROM people")
    assert plan.measures[0].hi == 2 * w


def test_declared_range_and_grouped_l0():
    plan = _plan("SELECT state, REGR_SLOPE(income, age) FROM people GROUP BY state")
    m, spec = plan.measures[0], plan.noise[0]
    assert (m.lo, m.hi) == (-100, 1000)
    assert spec.linf == pytest.approx(110.0)
    assert spec.l1 == pytest.approx(plan.l0 * 110.0)
    assert plan.outputs[1].expr[0] == "clamp" and plan.outputs[1].expr[1][0] == "add"


def test_policy_functions_validated():
    with pytest.raises(PolicyError, match="functions.sample_aggregate"):
        _policy({"sample_aggregate": ["median"]})
    with pytest.raises(PolicyError, match="functions.blocks"):
        _policy({"sample_aggregate": ["corr"], "blocks": 1})
    with pytest.raises(PolicyError, match="lower < upper"):
        _policy({"sample_aggregate": ["regr_slope"], "regr_slope": {"lower": 1, "upper": 1}})


def test_explain_names_k_and_the_range():
    from dpsql import explain
    from dpsql.noise.mechanisms import make_mechanism
    from dpsql.rewrite import to_sql
    plan = _plan("SELECT state, CORR(age, income) FROM people WHERE sex = 'F' GROUP BY state")
    mechs = {s.target: make_mechanism(s.mechanism, s.sensitivity, s.epsilon, s.delta) for s in plan.noise}
    from dpsql.cost import Cost
    rows = explain.private_rows(plan, to_sql(plan), mechs, None, charged=Cost(1.0, 0.0, 0.5), surcharge=0.0,
                                recon=None, cached=False, series=None)
    value = next(r for r in rows if r[0] == "value")
    assert "k = 10 blocks" in value[8] and "[-1, 1]" in value[8] and value[3] == pytest.approx(0.2)
