"""Sample-and-aggregate in the analysis: the policy must allow each function, ranges are derived
or declared, the sensitivity is L0 (hi - lo) / k, and EXPLAIN DP names k and the range."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpsql.analysis.analyze import Schema, Settings, analyze
from dpsql.analysis.measures import Count, SampleAggregate, Sum
from dpsql.analysis.parse import classify
from dpsql.datagen import demo_policy
from dpsql.errors import PolicyError, QueryRejected
from dpsql.policy import load_policy
from dpsql.postprocess import Add, Clamp, Ref

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


def _kind(m) -> str:
    """A measure's family by its class (Sum's subclasses, AVG's and VARIANCE's parts, are sums)."""
    return "count" if isinstance(m, Count) else "sample" if isinstance(m, SampleAggregate) else \
        "sum" if isinstance(m, Sum) else type(m).__name__


@pytest.mark.parametrize("sql, kinds", [
    ("SELECT COUNT(*), CORR(age, income) FROM people", ["count", "sample"]),
    ("SELECT state, COUNT(*), AVG(income), CORR(age, income) FROM people GROUP BY state",
     ["count", "sum", "count", "sample"]),
    ("SELECT state, CORR(age, income), COUNT(*), COVAR_POP(age, income), REGR_SLOPE(income, age), "
     "VARIANCE(age) FROM people GROUP BY state", ["sample", "count", "sample", "sample", "sum", "count", "sum"]),
    ("SELECT sex, SUM(income) FILTER (WHERE age > 30), CORR(age, income) FILTER (WHERE age > 30) FROM people "
     "WHERE state = 'CA' GROUP BY sex", ["sum", "sample"]),
    ("SELECT COUNT(*) * 2 + 1, CORR(age, income) / 2 FROM people", ["count", "sample"]),
])
def test_mixing_with_other_aggregates_accepted(sql, kinds):
    """Each measure, sample-and-aggregate or not, is one noisy part at an equal share of epsilon;
    nothing else changes (the same L0, the same mechanism)."""
    plan = _plan(sql)
    assert [_kind(m) for m in plan.measures] == kinds
    assert [s.target for s in plan.noise] == [m.name for m in plan.measures]
    assert all(s.epsilon == pytest.approx(1.0 / len(kinds)) and s.mechanism == "laplace" for s in plan.noise)
    assert plan.cost.epsilon == pytest.approx(1.0) and plan.selection is None
    for m, s in zip(plan.measures, plan.noise):
        if isinstance(m, SampleAggregate):
            assert s.linf == pytest.approx(float(m.hi - m.lo) / 10) and s.l1 == pytest.approx(plan.l0 * s.linf)


def test_mixing_splits_delta_and_selection_once():
    """Gaussian: delta split over the measures and partition selection; one selection for the query
    (a key with no public domain: visit_date), its own share of epsilon."""
    sql = ("SELECT v.visit_date, COUNT(*), CORR(v.cost, p.age), AVG(v.cost) FROM visits v JOIN people p "
           "ON v.person_id = p.person_id GROUP BY v.visit_date")
    plan = analyze(classify(sql).tree, _policy(ALLOW), SCHEMA, Settings(2.0, 1e-6, "gaussian"), "duckdb")
    assert [_kind(m) for m in plan.measures] == ["count", "sample", "sum", "count"]
    assert plan.selection is not None and plan.selection_noise.epsilon == pytest.approx(2.0 / 5)
    assert all(s.epsilon == pytest.approx(2.0 / 5) and s.delta == pytest.approx(1e-6 / 5) for s in plan.noise)
    assert plan.selection.delta == pytest.approx(1e-6 / 5)
    assert plan.cost.epsilon == pytest.approx(2.0) and plan.cost.delta == pytest.approx(1e-6)


@pytest.mark.parametrize("sql", ["SELECT MEDIAN(age), CORR(age, income) FROM people",
                                 "SELECT COUNT(DISTINCT education), CORR(age, income) FROM people"])
def test_mixing_with_quantiles_or_distinct_counts_refused(sql):
    with pytest.raises(QueryRejected, match="beside quantiles or COUNT"):
        _plan(sql)


@pytest.mark.parametrize("sql, join", [
    ("SELECT state, COUNT(*), CORR(age, income) FROM people GROUP BY state", "FULL JOIN"),
    ("SELECT COUNT(*), CORR(age, income) FROM people", "CROSS JOIN"),
    ("SELECT v.visit_date, COUNT(*), CORR(v.cost, p.age) FROM visits v JOIN people p "
     "ON v.person_id = p.person_id GROUP BY v.visit_date", "LEFT JOIN"),
])
def test_mixed_rewrite_joins_the_parts_on_the_keys(sql, join):
    """One SELECT: the general passes' result (_m) and the block rewrite's (_s) joined by the text
    keys, FULL on public domains (each part's groups kept), LEFT from the ordinary part under
    partition selection (its groups are the candidates); columns in the plan's measure order, then
    _units; the block part has no _units of its own."""
    from sqlglot import exp

    from dpsql.rewrite import rewrite, to_sql
    plan = _plan(sql)
    for dialect in ("duckdb", "postgres", "spark"):
        tree = rewrite(plan, dialect)
        names = [e.alias_or_name for e in tree.expressions]
        assert names == [f"_k{i}" for i in range(len(plan.keys))] + [m.name for m in plan.measures] + \
            (["_units"] if plan.selection is not None else [])
        joins = tree.args["joins"]
        assert len(joins) == 1 and joins[0].this.alias == "_s"
        text = to_sql(plan, dialect)
        assert join in text.upper().replace("FULL OUTER", "FULL").replace("LEFT OUTER", "LEFT")
        assert "IS NOT DISTINCT FROM" not in text.upper()       # a FULL JOIN PostgreSQL can hash
        s_part = joins[0].this.this
        assert "_units" not in [e.alias_or_name for e in s_part.expressions]
        assert any(isinstance(n, exp.Corr) for n in s_part.find_all(exp.Corr))


def test_corr_range_and_sensitivity():
    plan = _plan("SELECT CORR(age, income) AS c FROM people")
    m, spec = plan.measures[0], plan.noise[0]
    assert isinstance(m, SampleAggregate) and (m.lo, m.hi) == (-1, 1) and m.sample.blocks == 10
    assert spec.linf == pytest.approx(0.2) and spec.l1 >= 0.2
    assert plan.outputs[0].expr == Clamp(Ref(m.name), -1.0, 1.0)


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
    assert isinstance(plan.outputs[1].expr, Clamp) and isinstance(plan.outputs[1].expr.arg, Add)


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
    from dpsql.ledger import Cost
    rows = explain.private_rows(plan, to_sql(plan), mechs, None, charged=Cost(1.0, 0.0, 0.5), surcharge=0.0,
                                recon=None, cached=False, series=None)
    value = next(r for r in rows if r[0] == "value")
    assert "k = 10 blocks" in value[8] and "[-1, 1]" in value[8] and value[3] == pytest.approx(0.2)


def test_explain_mixed_shows_each_measure():
    """EXPLAIN DP of a mixed query: one value row per measure, each with its mechanism and its share
    of epsilon; the block measures name k and the range; the charge says how it is split."""
    from dpsql import explain
    from dpsql.ledger import Cost
    from dpsql.noise.mechanisms import make_mechanism
    from dpsql.rewrite import to_sql
    plan = _plan("SELECT state, COUNT(*), AVG(income), CORR(age, income), COVAR_POP(age, income) "
                 "FROM people GROUP BY state")
    mechs = {s.target: make_mechanism(s.mechanism, s.sensitivity, s.epsilon, s.delta) for s in plan.noise}
    rows = explain.private_rows(plan, to_sql(plan), mechs, None, charged=Cost(1.0, 0.0, 0.5), surcharge=0.0,
                                recon=None, cached=False, series=None)
    values = [r for r in rows if r[0] == "value"]
    assert [r[1] for r in values] == [m.label for m in plan.measures]
    assert all(r[2] == "laplace" and r[4] == pytest.approx(0.2) for r in values)
    assert sum("sample-and-aggregate over k = 10" in r[8] for r in values) == 2
    charge = next(r for r in rows if r[0] == "charge")
    assert "split evenly over 5 noisy part(s)" in charge[8]


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark"])
def test_arguments_with_non_terminating_derived_ranges_are_rewritten(dialect):
    """income / 7 ranges over [0, upper / 7], not a terminating decimal: the argument's clamp takes
    the range widened outward to a decimal grid (an exact SQL literal), instead of failing in the
    rewrite (an internal error found by the extreme-values grammar hunt)."""
    from dpsql.rewrite import to_sql
    plan = _plan("SELECT COVAR_POP(age / 3.0, income / 7), REGR_SLOPE(income / 7, age) FROM people", dialect=dialect)
    assert to_sql(plan, dialect)
    upper = Fraction(str(_policy().table("people").column("income").upper)) / 7
    covar = next(m.sample for m in plan.measures if isinstance(m, SampleAggregate) and m.sample.function == "covar_pop")
    lo, hi = covar.second_bounds
    assert lo == 0 and upper <= hi <= upper + Fraction(1, 10 ** 6)
    den = hi.denominator
    while den % 2 == 0 or den % 5 == 0:
        den //= 2 if den % 2 == 0 else 5
    assert den == 1, hi              # a terminating decimal
