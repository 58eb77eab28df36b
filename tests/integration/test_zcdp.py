"""zCDP accounting through the Session (DuckDB; the accounting does not depend on the engine):
what a query is charged, SET dpsql.rho, the rho floor, partition selection's delta part, the
surcharge, EXPLAIN DP's counts and planned series checked against what the ledger then allows,
SHOW dpsql.budget, the status line, the admin report, the accountant fixed per analyst."""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

import dpsql
from dpsql.ledger import accounting
from dpsql.admin import spending_report
from dpsql.errors import BudgetExhausted, InvalidSetting, PolicyError
from dpsql.policy import load_policy
from dpsql.release import mechanisms_for
from tests.conftest import policy_for


def zpolicy(tmp_path, epsilon: float = 100.0, delta: float = 1e-6, mechanism: str = "gaussian", **defaults) -> dict:
    pol = policy_for(tmp_path)
    pol["budget"].update(epsilon=epsilon, delta=delta, accountant="zcdp")
    pol["defaults"] = {"epsilon": 0.5, "delta": 1e-8, "mechanism": mechanism, **defaults}
    return pol


def explain(cur, sql: str) -> list[dict]:
    cur.execute("EXPLAIN DP (WIDE) " + sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def budget(cur) -> dict:
    cur.execute("SHOW dpsql.budget")
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def test_a_query_is_charged_the_rho_of_the_noise_it_gets(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path), analyst="ann") as conn:
        cur = conn.cursor()
        rows = explain(cur, "SELECT COUNT(*), SUM(income) FROM people")
        values = [r for r in rows if r["item"] == "value"]
        mechs = mechanisms_for(conn.session.plan("SELECT COUNT(*), SUM(income) FROM people"))[0]
        exact = sum((m.rho for m in mechs.values()), Fraction(0))
        assert [r["rho"] for r in values] == [float(m.rho) for m in mechs.values()]
        for m in mechs.values():           # Delta_g^2 / (2 sigma_g^2), about (sensitivity / sigma)^2 / 2
            assert float(m.rho) == pytest.approx((m.sensitivity / m.sigma) ** 2 / 2, rel=1e-6)
        [charge] = [r for r in rows if r["item"] == "charge"]
        assert charge["rho"] == float(exact) and charge["epsilon"] == 0.5
        cur.execute("SELECT COUNT(*), SUM(income) FROM people")
        [row] = conn.session.ledger.charges("ann")
        assert Fraction(Decimal(str(row["rho"]))) == pytest.approx(exact) and row["zcdp_delta"] == 0.0
        assert Decimal(conn.session.ledger.totals("ann").rho) == accounting.decimal_up(exact)
        status = cur.statusmessage
        assert status.startswith("rho charged ") and "this query alone: epsilon 0.5, delta 1e-08" in status
        assert "remaining rho" in status and "of 100 spent at delta 1e-06" in status
        b = budget(cur)
        assert b["accountant"] == "zcdp" and b["rho_spent"] == pytest.approx(float(exact))
        assert b["epsilon_spent"] == pytest.approx(float(accounting.epsilon_upper(accounting.decimal_up(exact),
                                                                                   Decimal("1E-6"))))
        assert b["delta_spent"] == 0.0 and b["delta_remaining"] == 1e-6       # Gaussian deltas are inside zCDP


def test_explain_counts_are_what_the_ledger_then_allows(people_db, tmp_path):
    pol = zpolicy(tmp_path, epsilon=1.0, mechanism="laplace")
    pol["reconstruction"] = {"cache_lifetime": 0}
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 0.1")
        left = {r["aggregate"]: r["queries"] for r in explain(cur, "SELECT COUNT(*) FROM people")
                if r["item"] == "budget_left"}
        assert left == {"zcdp": 4, "basic": 10}       # at (1, 1e-6) basic composition buys more Laplace queries
        for _ in range(4):
            cur.execute("SELECT COUNT(*) FROM people")
        with pytest.raises(BudgetExhausted, match="rho remaining"):
            cur.execute("SELECT COUNT(*) FROM people")
        left = {r["aggregate"]: r["queries"] for r in explain(cur, "SELECT COUNT(*) FROM people")
                if r["item"] == "budget_left"}
        assert left == {"zcdp": 0, "basic": 6}
    pol = zpolicy(tmp_path / "g", epsilon=1.0)
    pol["reconstruction"] = {"cache_lifetime": 0}
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 0.1")
        n = {r["aggregate"]: r["queries"] for r in explain(cur, "SELECT SUM(income) FROM people")
             if r["item"] == "budget_left"}["zcdp"]
        assert n > 90          # the same epsilon per query, Gaussian noise: many more under zCDP
        for _ in range(int(n)):
            cur.execute("SELECT SUM(income) FROM people")
        with pytest.raises(BudgetExhausted):
            cur.execute("SELECT SUM(income) FROM people")


def test_set_rho_calibrates_each_query_to_that_cost(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path), analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.rho = 0.01")
        assert cur.execute("SHOW dpsql.rho").fetchone() == (0.01,)
        assert cur.execute("SHOW dpsql.epsilon").fetchone() == (None,)       # rho calibrates now
        for sql in ("SELECT COUNT(*) FROM people", "SELECT state, AVG(income) FROM people GROUP BY state",
                    "SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date"):
            rows = explain(cur, sql)
            [charge] = [r for r in rows if r["item"] == "charge"]
            assert 0.01 * (1 - 1e-6) <= charge["rho"] <= 0.01, sql
            parts = [r["rho"] for r in rows if r["item"] in ("value", "partition_selection")]
            assert sum(parts) == pytest.approx(charge["rho"])
            if len(parts) > 1 and "visit_date" not in sql:
                assert parts[0] == pytest.approx(parts[1], rel=1e-6)    # an even split of rho
        before = conn.session.spending().rho_spent
        cur.execute("SELECT COUNT(*) FROM people")
        assert conn.session.spending().rho_spent - before == pytest.approx(0.01, rel=1e-6)
        cur.execute("SET dpsql.mechanism = 'laplace'")
        cur.execute("SELECT COUNT(*) FROM people")              # a Laplace query at rho 0.01: epsilon sqrt(0.02)
        assert "this query alone: epsilon 0.1414" in cur.statusmessage
        cur.execute("SET dpsql.epsilon = 0.5")
        assert cur.execute("SHOW dpsql.rho").fetchone() == (None,)
        cur.execute("RESET dpsql.rho")
        assert conn.session.config.rho is None                          # the policy sets no default rho
        for bad, why in (("0", "positive"), ("1e-9", "minimum"), ("50", "lifetime budget allows")):
            with pytest.raises(InvalidSetting, match=why):
                cur.execute(f"SET dpsql.rho = {bad}")


def test_set_rho_needs_zcdp_accounting(people_db, tmp_path):
    with dpsql.connect(people_db, policy=policy_for(tmp_path), analyst="ann") as conn:     # basic
        with pytest.raises(InvalidSetting, match="basic composition"):
            conn.cursor().execute("SET dpsql.rho = 0.01")


def test_the_rho_floor_is_charged_and_shown(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path, min_rho=0.01), analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 0.1")          # a Gaussian at 0.1 costs about 2.4e-4
        rows = explain(cur, "SELECT COUNT(*) FROM people")
        assert [r["rho"] for r in rows if r["item"] == "rho_floor"] == [0.01]
        assert [r["rho"] for r in rows if r["item"] == "charge"] == [0.01]
        cur.execute("SELECT COUNT(*) FROM people")
        assert conn.session.spending().rho_spent == 0.01
        with pytest.raises(InvalidSetting, match="minimum 0.01"):
            cur.execute("SET dpsql.rho = 0.005")


def test_partition_selection_charges_its_delta_outside_zcdp(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path), analyst="ann") as conn:
        cur = conn.cursor()
        rows = explain(cur, "SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
        [sel] = [r for r in rows if r["item"] == "partition_selection"]
        assert sel["rho"] == 0.25 ** 2 / 2                     # its Laplace, at epsilon 0.5 / 2
        cur.execute("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date")
        assert "delta 5e-09 (partition selection)" in cur.statusmessage
        [row] = conn.session.ledger.charges()
        assert row["zcdp_delta"] == sel["delta"] == 5e-9
        b = budget(cur)
        assert b["delta_spent"] == 5e-9 and b["delta_remaining"] == pytest.approx(1e-6 - 5e-9)


def test_a_query_selecting_people_by_identity_pays_the_surcharge_in_rho_too(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path), analyst="ann") as conn:
        cur = conn.cursor()
        sql = "SELECT COUNT(*) FROM people WHERE person_id IN (4, 8, 15)"
        rows = explain(cur, sql)
        [value] = [r for r in rows if r["item"] == "value"]
        [charge] = [r for r in rows if r["item"] == "charge"]
        assert charge["rho"] == pytest.approx(2 * value["rho"]) and charge["epsilon"] == 1.0
        cur.execute(sql)
        assert "surcharge" in cur.statusmessage
        assert conn.session.spending().rho_spent == pytest.approx(2 * value["rho"])


def test_planned_series_under_basic_advanced_and_zcdp(people_db, tmp_path):
    with dpsql.connect(people_db, policy=zpolicy(tmp_path, epsilon=10.0, mechanism="laplace"),
                       analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 0.05")
        cur.execute("SET dpsql.plan_queries = 300")
        assert cur.execute("SHOW dpsql.plan_queries").fetchone() == (300,)
        plans = {r["aggregate"]: r for r in explain(cur, "SELECT COUNT(*) FROM people") if r["item"] == "plan"}
        assert set(plans) == {"basic", "advanced", "zcdp"} and all(p["queries"] == 300 for p in plans.values())
        expected = {p.rule: p for p in accounting.plan_series(300, 0.05, 0.0, accounting.laplace_rho(0.05), 0,
                                                             10.0, 1e-6)}
        for rule, row in plans.items():
            assert row["epsilon"] == pytest.approx(expected[rule].epsilon)
            assert f"which buys {expected[rule].most:,} of them" in row["detail"]
        assert plans["basic"]["epsilon"] == pytest.approx(15.0) and "exceeds" in plans["basic"]["detail"]
        assert plans["zcdp"]["epsilon"] < plans["advanced"]["epsilon"] < 10 and "fits" in plans["zcdp"]["detail"]
        cur.execute("RESET dpsql.plan_queries")
        assert not [r for r in explain(cur, "SELECT COUNT(*) FROM people") if r["item"] == "plan"]


def test_policy_default_rho(people_db, tmp_path):
    pol = zpolicy(tmp_path, rho=0.02)
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        assert conn.session.config.rho == 0.02
        cur.execute("SELECT COUNT(*) FROM people")
        assert conn.session.spending().rho_spent == pytest.approx(0.02, rel=1e-6)
        cur.execute("SET dpsql.epsilon = 0.3")
        assert conn.session.config.rho is None
        cur.execute("RESET ALL")
        assert conn.session.config.rho == 0.02
    pol["analysts"] = {"bob": {"accountant": "basic"}}
    with dpsql.connect(people_db, policy=pol, analyst="bob") as conn:
        assert conn.session.config.rho is None and conn.session.spending().accountant == "basic"


def test_policy_validation(tmp_path):
    base = zpolicy(tmp_path)
    for change, key in (({"budget": {"epsilon": 1.0, "accountant": "zcdp", "ledger": "x"}}, "budget.accountant"),
                        ({"budget": {"epsilon": 1.0, "delta": 1e-6, "accountant": "rdp", "ledger": "x"}},
                         "budget.accountant"),
                        ({"defaults": {"epsilon": 0.5, "rho": 1e-9}}, "defaults.rho"),
                        ({"budget": {"epsilon": 1.0, "delta": 1e-6, "accountant": "basic", "ledger": "x"},
                          "defaults": {"epsilon": 0.5, "rho": 0.01}}, "defaults.rho"),
                        ({"analysts": {"zed": {"delta": 0.0}}}, "analysts.zed.delta"),
                        ({"analysts": {"zed": {"accountant": "zcdp", "delta": 0.0}}}, "analysts.zed.accountant")):
        with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
            load_policy(base | change)
    # a budget with no delta is a pure epsilon budget: basic composition, which needs no delta
    pure = load_policy({"budget": {"epsilon": 1.0, "ledger": "x"}, "tables": {}})
    assert pure.budget.accountant == "basic"
    assert load_policy({"budget": {"epsilon": 1.0, "delta": 1e-6, "ledger": "x"}, "tables": {}}).budget.accountant \
        == "zcdp"


def test_the_accountant_stays_what_it_was_when_spending_started(people_db, tmp_path):
    pol = zpolicy(tmp_path)
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        conn.cursor().execute("SELECT COUNT(*) FROM people")
    pol["budget"]["accountant"] = "basic"
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        assert cur.execute("SHOW dpsql.accountant").fetchone() == ("zcdp",)
        cur.execute("SELECT SUM(age) FROM people")
        assert cur.statusmessage.startswith("rho charged")
        assert conn.session.spending().accountant == "zcdp"
    with dpsql.connect(people_db, policy=pol, analyst="bob") as conn:      # new analysts get the policy's
        assert conn.cursor().execute("SHOW dpsql.accountant").fetchone() == ("basic",)


def test_a_repeat_and_the_admin_report(people_db, tmp_path):
    pol = zpolicy(tmp_path)
    with dpsql.connect(people_db, policy=pol, analyst="ann") as conn:
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) FROM people")
        cur.execute("SELECT COUNT(*) FROM people")
        assert cur.statusmessage.startswith("repeated the identical earlier answer; nothing charged; remaining rho")
        spent = conn.session.spending()
    [line] = spending_report(pol)
    assert line.spending == spent and line.queries == 1 and line.spending.accountant == "zcdp"
    assert line.spending.rho_total == pytest.approx(float(accounting.rho_capacity(100.0, 1e-6)))
