"""How far a budget goes under basic, advanced and zCDP accounting, for the core workload.

    python benchmarks/accounting.py                 # report on stdout and in benchmarks/results/accounting.md
    python benchmarks/accounting.py --out -         # stdout only

Everything is computed by the code that charges, on a small generated database (2,000 people:
sensitivities and costs depend on the policy, not on the data):

1. Queries that fit, at equal noise. Each workload query is planned by a Session at the per-query
   setting epsilon 0.1, delta 1e-8 (Laplace, or analytic Gaussian), and its charge (the Session's
   own: (epsilon, delta) and rho with the delta part) is charged again and again into a fresh ledger
   until the ledger refuses: under basic composition and under zCDP, for budgets (10, 1e-6) and
   (1, 1e-6). Advanced composition is not an accountant dpsql charges; its column is the largest k
   for which k such queries are (10, 1e-6)- or (1, 1e-6)-DP by Dwork, Rothblum & Vadhan's theorem
   (accounting.advanced_count), the slack delta' being what the queries' own deltas leave.
2. Noise at equal query count (100). For each rule the per-query setting that lets 100 such
   queries fit the budget: basic, epsilon and delta divided by 100; advanced, the largest epsilon
   whose 100-fold advanced composition fits (half the budget's delta to the queries when they
   need one, half to delta'); zCDP, SET dpsql.rho to 1/100 of the rho the budget allows (after the
   delta parts of partition selection, given half the delta). The 100 queries are then run through
   a Session on a fresh ledger (basic and zCDP: all 100 must be answered and charged; advanced,
   which dpsql does not charge, on an unlimited budget), and the median 95% half-width of the
   first released value is reported (for AVG, the interval-arithmetic width of the average, which
   depends on the noisy count drawn: it varies a little from run to run).
3. When Laplace is still the better choice: for k queries sharing the budget, Laplace under basic
   composition against Gaussian noise under zCDP, from EXPLAIN DP's half-widths.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import duckdb

import dpsql
from dpsql import charge
from dpsql.ledger import accounting
from dpsql.datagen import demo_policy, generate
from dpsql.errors import BudgetExhausted
from dpsql.ledger import Ledger
from dpsql.release import mechanisms_for

QUERIES = {
    "Q1": "SELECT COUNT(*) FROM people",
    "Q2": "SELECT state, COUNT(*) FROM people GROUP BY state",
    "Q3": "SELECT SUM(income) FROM people",
    "Q4": "SELECT AVG(income) FROM people",
    "Q5": "SELECT education, AVG(income) FROM people WHERE age > 30 GROUP BY education",
    "Q6": "SELECT state, SUM(cost) FROM visits GROUP BY state",
    "Q7": "SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date",
}
BUDGETS = ((10.0, 1e-6), (1.0, 1e-6))
MECHANISMS = ("laplace", "gaussian")
EPSILON, DELTA = 0.1, 1e-8          # the per-query setting of table 1
K = 100                             # the query count of table 2
LIMIT = 200_000                     # charges tried at most per cell


def policy(ledger: Path, mechanism: str, accountant: str, epsilon: float, delta: float) -> dict:
    pol = demo_policy(str(ledger), epsilon=epsilon, delta=delta, mechanism=mechanism, accountant=accountant,
                      query_epsilon=min(0.5, epsilon))
    pol["defaults"]["delta"] = DELTA
    pol["timing"] = {"quantum": 0, "floor": 0}
    pol["reconstruction"] = {"cache_lifetime": 0}
    pol["limits"] = {"max_released_rows": 1_000_000}
    return pol


def needs_delta(session, sql: str) -> bool:
    plan = session.plan(sql)
    return plan.selection is not None or plan.mechanism != "laplace"


def _cost(session, sql: str):
    """What the session would charge for a query at its settings now (dpsql.charge.charge_of)."""
    plan = session.plan(sql)
    return charge.charge_of(plan, session.policy, *mechanisms_for(plan))[0]


def charge_until_refused(cost, accountant: str, epsilon: float, delta: float, work: Path, tag: str) -> int:
    """Charge a query's cost into a fresh ledger until it refuses; the count answered."""
    path = work / f"count-{tag}.sqlite"
    rho = accounting.decimal_up(cost.rho)
    n = 0
    with Ledger(path) as led:
        while n < LIMIT:
            try:
                led.charge("a", cost.epsilon, cost.delta, epsilon_total=epsilon, delta_total=delta,
                           mechanism="bench", params={}, rho=rho, zcdp_delta=cost.zcdp_delta, accountant=accountant)
            except BudgetExhausted:
                break
            n += 1
    return n


def table_fits(db: str, work: Path) -> list[tuple]:
    rows = []
    for name, sql in QUERIES.items():
        for mech in MECHANISMS:
            with dpsql.connect(db, policy=policy(work / "plan.sqlite", mech, "zcdp", 10.0, 1e-6), analyst="a") as conn:
                s = conn.session
                s.config.epsilon, s.config.delta, s.config.rho = EPSILON, DELTA, None
                cost = _cost(s, sql)
            cells = [name, mech, float(cost.rho)]
            for eps_b, dlt_b in BUDGETS:
                tag = f"{name}-{mech}-{eps_b:g}"
                basic = charge_until_refused(cost, "basic", eps_b, dlt_b, work, tag + "-basic")
                zcdp = charge_until_refused(cost, "zcdp", eps_b, dlt_b, work, tag + "-zcdp")
                assert zcdp == accounting.zcdp_count(0, 0, accounting.decimal_up(cost.rho), cost.zcdp_delta,
                                                     eps_b, dlt_b)
                assert basic == accounting.basic_count(0, 0, cost.epsilon, cost.delta, eps_b, dlt_b)
                adv = accounting.advanced_count(cost.epsilon, cost.delta, eps_b, dlt_b)
                cells += [basic, adv, zcdp]
            rows.append(tuple(cells))
            print(f"  fits {name} {mech}: {cells[3:]}", file=sys.stderr)
    return rows


def first_width(cur, sql: str) -> float:
    """The 95% half-width of the first released noisy value (first row, first column that has one).
    When partition selection released no group, the half-width of the first value's noise, from
    EXPLAIN DP (the same for a count, which is all Q7 releases)."""
    if cur.half_widths:
        for width in cur.half_widths[0]:
            if width is not None:
                return width
    cur.execute("EXPLAIN DP " + sql)
    cols = [d[0] for d in cur.description]
    return next(r[cols.index("ci95_half_width")] for r in cur.fetchall() if r[0] == "value")


def run_k(db: str, work: Path, tag: str, mech: str, accountant: str, eps_b: float, dlt_b: float,
          settings: list[str], sql: str, k: int) -> float:
    """Run the query k times on a fresh ledger; every one must be answered. Median half-width."""
    widths = []
    with dpsql.connect(db, policy=policy(work / f"run-{tag}.sqlite", mech, accountant, eps_b, dlt_b),
                       analyst="a") as conn:
        cur = conn.cursor()
        for stmt in settings:
            cur.execute(stmt)
        for _ in range(k):
            cur.execute(sql)
            widths.append(first_width(cur, sql))
    widths.sort()
    return widths[len(widths) // 2]


def advanced_epsilon_for(k: int, eps_b: float, delta_prime: float) -> float:
    """The largest per-query epsilon whose k-fold advanced composition (slack delta') is within eps_b."""
    lo, hi = 0.0, eps_b
    for _ in range(100):
        mid = (lo + hi) / 2
        if accounting.advanced_epsilon(k, mid, delta_prime) * (1 + 1e-12) <= eps_b:
            lo = mid
        else:
            hi = mid
    return lo


def table_widths(db: str, work: Path) -> list[tuple]:
    rows = []
    for name, sql in QUERIES.items():
        for mech in MECHANISMS:
            for eps_b, dlt_b in BUDGETS:
                tag = f"{name}-{mech}-{eps_b:g}"
                with dpsql.connect(db, policy=policy(work / "plan.sqlite", mech, "basic", eps_b, dlt_b),
                                   analyst="p") as conn:
                    delta_needed = needs_delta(conn.session, sql)
                # basic: an even split of both
                basic = run_k(db, work, tag + "-basic", mech, "basic", eps_b, dlt_b,
                              [f"SET dpsql.epsilon = {eps_b / K!r}", f"SET dpsql.delta = {dlt_b / K!r}"], sql, K)
                # advanced: the largest epsilon whose K-fold composition fits (a comparison: run once)
                q_delta = dlt_b / (2 * K) if delta_needed else 0.0
                adv_eps = advanced_epsilon_for(K, eps_b, dlt_b - K * q_delta)
                assert accounting.advanced_epsilon(K, adv_eps, dlt_b - K * q_delta) <= eps_b
                adv = run_k(db, work, tag + "-adv", mech, "basic", 1e9, 0.5,
                            [f"SET dpsql.epsilon = {adv_eps!r}", f"SET dpsql.delta = {max(q_delta, 1e-12)!r}"], sql, K)
                # zCDP: 1/K of what the budget allows once K delta parts are set aside
                with dpsql.connect(db, policy=policy(work / "plan.sqlite", mech, "zcdp", eps_b, dlt_b),
                                   analyst="p") as conn:
                    s = conn.session
                    s.config.delta = dlt_b / (2 * K)
                    part = Decimal(repr(_cost(s, sql).zcdp_delta))
                cap = accounting.rho_capacity(eps_b, Decimal(repr(dlt_b)) - K * part)
                rho = float(cap / K) * (1 - 1e-9)
                zcdp = run_k(db, work, tag + "-zcdp", mech, "zcdp", eps_b, dlt_b,
                             [f"SET dpsql.delta = {dlt_b / (2 * K)!r}", f"SET dpsql.rho = {rho!r}"], sql, K)
                rows.append((name, mech, f"({eps_b:g}, {dlt_b:g})", basic, adv, zcdp))
                print(f"  widths {name} {mech} {eps_b:g}: {basic:.4g} {adv:.4g} {zcdp:.4g}", file=sys.stderr)
    return rows


CROSSOVER = ("Q1", "Q4", "Q6", "Q7")


def explain_width(cur, sql: str) -> float:
    """The 95% half-width of the first noisy value's mechanism (EXPLAIN DP)."""
    cur.execute("EXPLAIN DP " + sql)
    cols = [d[0] for d in cur.description]
    return next(r[cols.index("ci95_half_width")] for r in cur.fetchall() if r[0] == "value")


def table_crossover(db: str, work: Path) -> list[tuple]:
    """For k queries: Laplace under basic composition (epsilon and delta split k ways) against Gaussian
    under zCDP (rho split k ways); the largest k at which Laplace is still the less noisy (EXPLAIN DP)."""
    rows = []
    for name in CROSSOVER:
        sql = QUERIES[name]
        for eps_b, dlt_b in BUDGETS:
            with dpsql.connect(db, policy=policy(work / "x.sqlite", "laplace", "basic", eps_b, dlt_b),
                               analyst="x") as lap, \
                    dpsql.connect(db, policy=policy(work / "x.sqlite", "gaussian", "zcdp", eps_b, dlt_b),
                                  analyst="y") as gau:
                lc, gc = lap.cursor(), gau.cursor()
                last = 0
                for k in range(1, 201):
                    lc.execute(f"SET dpsql.epsilon = {eps_b / k!r}")
                    lc.execute(f"SET dpsql.delta = {dlt_b / k!r}")
                    gc.execute(f"SET dpsql.delta = {dlt_b / (2 * k)!r}")
                    part = Decimal(repr(_cost(gau.session, sql).zcdp_delta))
                    cap = accounting.rho_capacity(eps_b, Decimal(repr(dlt_b)) - k * part)
                    gc.execute(f"SET dpsql.rho = {float(cap / k) * (1 - 1e-9)!r}")
                    if explain_width(lc, sql) < explain_width(gc, sql):
                        last = k
                    elif k > last + 20:
                        break
            rows.append((name, f"({eps_b:g}, {dlt_b:g})", last))
            print(f"  crossover {name} {eps_b:g}: {last}", file=sys.stderr)
    return rows


def fmt(x) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x >= 1000:
            return f"{x:,.0f}"
        return f"{x:.3g}"
    return str(x)


def report(fits: list[tuple], widths: list[tuple], cross: list[tuple], seconds: float) -> str:
    out = ["# Accounting: how far a budget goes", "",
           "`python benchmarks/accounting.py` (see its docstring). Workload: the core benchmark's Q1-Q6 and",
           "Q7, a GROUP BY with partition selection (`SELECT visit_date, COUNT(*) FROM visits GROUP BY",
           "visit_date`). Policy: `dpsql.datagen.demo_policy` (people: 1 row, 1 group per person; visits:",
           "5 rows, 2 groups; income in [0, 500000], cost in [0, 2000]).", "",
           f"## Queries that fit, at equal noise (per query epsilon {EPSILON:g}, delta {DELTA:g})", "",
           "Counted by charging each query's cost into a fresh ledger until it refuses (basic, zCDP);",
           "advanced composition by its theorem. rho: the query's zCDP cost.", "",
           "| query | noise | rho per query | (10, 1e-6) basic | advanced | zCDP | (1, 1e-6) basic | advanced | zCDP |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in fits:
        out.append("| " + " | ".join(fmt(x) if i != 2 else f"{x:.3g}" for i, x in enumerate(r)) + " |")
    out += ["", f"## 95% half-width of the first released value at {K} queries", "",
            f"Each rule's per-query setting for {K} queries within the budget; basic and zCDP runs answered",
            f"and charged all {K} on a fresh ledger; advanced ran {K} at its setting on an unlimited budget.",
            "Median half-width of the first released value (AVG: of the average; it depends on the noisy",
            "count drawn and varies a little between runs; 500,000 is the whole range: no information).",
            "Smaller is better.", "",
            "| query | noise | budget | basic | advanced | zCDP | zCDP vs basic |",
            "|---|---|---|---:|---:|---:|---:|"]
    for name, mech, budget, b, a, z in widths:
        out.append(f"| {name} | {mech} | {budget} | {fmt(b)} | {fmt(a)} | {fmt(z)} | {b / z:.2f}x |")
    out += ["", "## When Laplace (basic composition) is still the less noisy", "",
            "k queries sharing the budget: Laplace with epsilon and delta split k ways, against Gaussian",
            "noise with rho split k ways under zCDP (the mechanism's 95% half-width, from EXPLAIN DP). Up to",
            "the k shown Laplace is less noisy; beyond it the Gaussian under zCDP is.", "",
            "| query | budget | Laplace less noisy up to k = |", "|---|---|---:|"]
    out += [f"| {name} | {budget} | {k} |" for name, budget, k in cross]
    out += ["", f"Run time: {seconds:.0f} s.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=2000)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "accounting.md"),
                    help="report file, or - for stdout only")
    args = ap.parse_args(argv)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dpsql-accounting-") as tmp:
        work = Path(tmp)
        db = str(work / "bench.duckdb")
        con = duckdb.connect(db)
        generate(con, args.people, seed=0)
        con.close()
        print("queries that fit ...", file=sys.stderr)
        fits = table_fits(db, work)
        print("half-widths at equal count ...", file=sys.stderr)
        widths = table_widths(db, work)
        print("crossover ...", file=sys.stderr)
        cross = table_crossover(db, work)
    text = report(fits, widths, cross, time.monotonic() - start)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
