"""Deterministic synthetic `people` and `visits`, generated inside the database.

Every value is a function of (seed, row key, column name): a 32-bit integer hash
(Wellons' "lowbias32": xorshift-multiply, three rounds) written in plain SQL arithmetic on
UBIGINT, turned into a uniform in [0, 1) and then into a value by an inverse CDF or a
Box-Muller step. No row passes through Python and random() is never called, so the tables
are identical on every run, thread count and DuckDB version (on another platform, exp/ln/cos
could at most differ in a last bit, which rounding incomes to dollars and costs to cents hides).
Keys wrap at 2**32: person ids stay distinct per column up to 2**32 people, visits up to 2**28.

The shapes are chosen so that a differential-privacy layer has something to do: a few
incomes above the declared 500000 bound and visit costs above 2000 (clipping matters), and
a geometric tail of visits per person up to MAX_VISITS (per-person bounding matters).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import duckdb

MAX_VISITS = 12
VISIT_START = "2023-01-01"          # visit_date spans the two years from here
VISIT_DAYS = 731

# (value, weight): weights are parts of their sum.
STATES = (("CA", 25), ("TX", 18), ("NY", 14), ("FL", 14), ("PA", 8), ("IL", 8), ("OH", 7), ("WA", 6))
SEXES = (("F", 51), ("M", 49))
EDUCATION = (("none", 9), ("high_school", 38), ("bachelor", 32), ("master", 15), ("phd", 6))
KINDS = (("checkup", 45), ("lab", 25), ("specialist", 20), ("emergency", 10))

_MEDIAN_INCOME = {"none": 26_000, "high_school": 40_000, "bachelor": 68_000, "master": 86_000, "phd": 110_000}
_MEDIAN_COST = {"checkup": 120, "lab": 90, "specialist": 450, "emergency": 1_100}
_INCOME_SIGMA = 0.65
_COST_SIGMA = 0.7
_NO_INCOME = 0.04                   # share of people with income 0
_HOME_STATE = 0.92                  # share of visits in the person's own state
_MAX_COST = 5_000

_MASK = 0xFFFF_FFFF
_PEOPLE_UNIFORMS = ("age", "sex", "state", "education", "employed", "income_r", "income_t", "visits")
_VISIT_UNIFORMS = ("date", "away", "state", "kind", "cost_r", "cost_t")


def generate(con: duckdb.DuckDBPyConnection, people: int, *, seed: int = 0,
             visits_per_person: float = 3.0, primary_key_copy: bool = False) -> None:
    """Create (or replace) `people` and `visits`, and `people_pk` if asked, in one transaction.

    Every value is a function of (seed, row, column) only: the same arguments give the same
    tables, and another seed gives unrelated ones.

    people(person_id 1..people, age, income, state, sex, education): one row per person, no key.
    visits(visit_id, person_id, visit_date, state, cost, kind): 0..MAX_VISITS per person,
    geometric, mean `visits_per_person`; visit_id = 100 * person_id + k (unique, not dense).
    people_pk: the same rows as people with person_id PRIMARY KEY; dropped when not asked
    for, so a stale copy never disagrees with people.
    """
    if isinstance(people, bool) or not isinstance(people, int) or people < 0:
        raise ValueError("people must be a whole number >= 0")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError("seed must be an integer")
    if not 0 <= visits_per_person <= MAX_VISITS - 1:
        raise ValueError(f"visits_per_person must be in [0, {MAX_VISITS - 1}]")
    statements = [
        "CREATE OR REPLACE TABLE people (person_id BIGINT NOT NULL, age INTEGER, income DOUBLE, "
        "state VARCHAR, sex VARCHAR, education VARCHAR)",
        "INSERT INTO people SELECT person_id, age, income, state, sex, education "
        f"FROM ({_people_sql(people, seed, visits_per_person)})",
        "CREATE OR REPLACE TABLE visits (visit_id BIGINT, person_id BIGINT NOT NULL, visit_date DATE, "
        "state VARCHAR, cost DOUBLE, kind VARCHAR)",
        f"INSERT INTO visits {_visits_sql(people, seed, visits_per_person)}",
    ]
    if primary_key_copy:
        statements += [
            "CREATE OR REPLACE TABLE people_pk (person_id BIGINT PRIMARY KEY, age INTEGER, income DOUBLE, "
            "state VARCHAR, sex VARCHAR, education VARCHAR)",
            "INSERT INTO people_pk SELECT * FROM people",
        ]
    else:
        statements.append("DROP TABLE IF EXISTS people_pk")
    con.execute("BEGIN TRANSACTION")
    try:
        for sql in statements:
            con.execute(sql)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def demo_policy(ledger: str = "budget.sqlite", *, epsilon: float = 10.0, delta: float = 1e-6,
                query_epsilon: float = 0.5, mechanism: str = "laplace",
                accountant: str | None = None, query_rho: float | None = None) -> dict[str, Any]:
    """The policy (as a dict, the structure of the TOML file) for the generated tables.

    A relative `ledger` is resolved against the policy file's directory (or the working
    directory when the dict is passed directly). `accountant` None leaves the policy's default;
    `query_rho` sets [defaults] rho (each query calibrated to that zCDP cost).
    """
    states = sorted(v for v, _ in STATES)
    budget: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "ledger": ledger}
    if accountant is not None:
        budget["accountant"] = accountant
    return {
        "budget": budget,
        "defaults": {"epsilon": query_epsilon, "mechanism": mechanism,
                     **({"rho": query_rho} if query_rho is not None else {})},
        "tables": {
            "people": {
                "privacy_unit": "person_id",
                "max_rows_per_unit": 1,
                "max_groups_per_unit": 1,
                "columns": {
                    "age": {"lower": 0, "upper": 120},
                    "income": {"lower": 0, "upper": 500_000},
                    "state": {"values": list(states)},
                    "sex": {"values": sorted(v for v, _ in SEXES)},
                    "education": {"values": [v for v, _ in EDUCATION]},
                },
            },
            "visits": {
                "privacy_unit": "person_id",
                "max_rows_per_unit": 5,
                "max_groups_per_unit": 2,
                "columns": {
                    "cost": {"lower": 0, "upper": 2_000},
                    "state": {"values": list(states)},
                    "kind": {"values": [v for v, _ in KINDS]},
                    "visit_date": {"lower": _dt.date(2023, 1, 1), "upper": _dt.date(2024, 12, 31)},
                },
            },
        },
        "public": {"tables": []},      # no table here may be read row by row
    }


# --- SQL building -----------------------------------------------------------------------------

def _people_sql(people: int, seed: int, visits_per_person: float) -> str:
    """SELECT person_id, age, income, state, sex, education, n_visits for persons 1..people."""
    u = _uniforms(f"range(1, {people + 1}) AS r(person_id)", ["person_id"], "person_id",
                  _PEOPLE_UNIFORMS, seed, "people")
    age = "18 + CAST(floor(78 * (0.35 * u_age + 0.65 * (1 - sqrt(1 - u_age)))) AS INTEGER)"
    n_visits = _visit_count("u_visits", visits_per_person)
    base = (f"SELECT person_id, {age} AS age, {_choice('u_sex', SEXES)} AS sex, "
            f"{_choice('u_state', STATES)} AS state, {_choice('u_education', EDUCATION)} AS education_drawn, "
            f"u_employed, u_income_r, u_income_t, {n_visits} AS n_visits FROM ({u})")
    # The young have not finished every degree yet.
    education = ("CASE WHEN age < 22 AND education_drawn IN ('bachelor', 'master', 'phd') THEN 'high_school' "
                 "WHEN age < 24 AND education_drawn IN ('master', 'phd') THEN 'bachelor' "
                 "WHEN age < 27 AND education_drawn = 'phd' THEN 'master' ELSE education_drawn END")
    shaped = f"SELECT *, {education} AS education FROM ({base})"
    # Log-normal around a median set by education, peaking in the fifties.
    log_median = (f"CASE education {_when_then({k: math.log(v) for k, v in _MEDIAN_INCOME.items()})} END"
                  " - 0.00055 * (age - 50) * (age - 50)")
    income = (f"CASE WHEN u_employed < {_NO_INCOME} THEN 0.0 ELSE "
              f"round(exp({log_median} + {_INCOME_SIGMA} * {_normal('u_income_r', 'u_income_t')})) END")
    return (f"SELECT person_id, age, {income} AS income, state, sex, education, n_visits "
            f"FROM ({shaped})")


def _visits_sql(people: int, seed: int, visits_per_person: float) -> str:
    """SELECT visit_id, person_id, visit_date, state, cost, kind: n_visits rows per person."""
    expanded = (f"SELECT person_id, age, state AS home_state, unnest(range(n_visits)) AS k "
                f"FROM ({_people_sql(people, seed, visits_per_person)}) WHERE n_visits > 0")
    u = _uniforms(f"({expanded})", ["person_id", "age", "home_state", "k"], "person_id * 16 + k",
                  _VISIT_UNIFORMS, seed, "visits")
    kind = _choice("u_kind", KINDS)
    drawn = (f"SELECT person_id, k, age, home_state, u_date, u_away, u_state, u_cost_r, u_cost_t, "
             f"{kind} AS kind FROM ({u})")
    median = f"CASE kind {_when_then(_MEDIAN_COST)} END"
    cost = (f"least({_MAX_COST}, round({median} * (0.75 + age / 200.0) * "
            f"exp({_COST_SIGMA} * {_normal('u_cost_r', 'u_cost_t')}), 2))")
    return (f"SELECT 100 * person_id + k AS visit_id, person_id, "
            f"DATE '{VISIT_START}' + CAST(floor(u_date * {VISIT_DAYS}) AS INTEGER) AS visit_date, "
            f"CASE WHEN u_away < {_HOME_STATE} THEN home_state ELSE {_choice('u_state', STATES)} END AS state, "
            f"CAST({cost} AS DOUBLE) AS cost, kind FROM ({drawn})")


def _uniforms(source: str, keep: Sequence[str], key: str, names: Sequence[str], seed: int,
              table: str) -> str:
    """SELECT keep..., u_<name> DOUBLE in [0, 1) for each name, from `source`.

    u_<name> = lowbias32(key xor salt(seed, table.name)) / 2**32. The hash is a bijection of
    32-bit words, so keys below 2**32 get distinct values per column. Each round is its own
    SELECT so that no expression text repeats its input.
    """
    kept = ", ".join(keep)
    m = f"{_MASK}::UBIGINT"
    cols = ", ".join(f"xor(CAST({key} AS UBIGINT) & {m}, {_salt(seed, f'{table}.{n}')}::UBIGINT) AS h_{n}"
                     for n in names)
    sql = f"SELECT {kept}, {cols} FROM {source}"
    for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        cols = ", ".join(f"(xor(h_{n}, h_{n} >> {shift}) * {mult}::UBIGINT) & {m} AS h_{n}" for n in names)
        sql = f"SELECT {kept}, {cols} FROM ({sql})"
    cols = ", ".join(f"CAST(xor(h_{n}, h_{n} >> 16) AS DOUBLE) / 4294967296.0 AS u_{n}" for n in names)
    return f"SELECT {kept}, {cols} FROM ({sql})"


def _salt(seed: int, name: str) -> int:
    """A 32-bit word per (seed, column): blake2b, stable everywhere."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=4).digest(), "little")


def _choice(u: str, weighted: Sequence[tuple[str, int]]) -> str:
    """CASE picking a value with probability weight / total from a uniform column."""
    total = sum(w for _, w in weighted)
    cases, upto = [], 0
    for value, weight in weighted[:-1]:
        upto += weight
        cases.append(f"WHEN {u} < {upto / total!r} THEN '{value}'")
    return f"CASE {' '.join(cases)} ELSE '{weighted[-1][0]}' END"


def _when_then(mapping: dict[str, float]) -> str:
    return " ".join(f"WHEN '{k}' THEN {float(v)!r}" for k, v in mapping.items())


def _normal(r: str, t: str) -> str:
    """A standard normal from two uniforms (Box-Muller); 1 - u is in (0, 1]."""
    return f"(sqrt(-2 * ln(1 - {r})) * cos(2 * pi() * {t}))"


def _visit_count(u: str, mean: float) -> str:
    """A count in 0..MAX_VISITS with P(N = k) proportional to q**k and the given mean.

    Inverse CDF of that truncated geometric: N = floor(ln(1 - u (1 - q**(M+1))) / ln q),
    M = MAX_VISITS; it has no spike at M. q < 1 for means below M/2, q > 1 above.
    """
    if mean == 0:
        return "0"
    q = _ratio_for_mean(mean)
    if abs(math.log(q)) < 1e-9:                               # q = 1: uniform on 0..M
        return f"CAST(floor({u} * {MAX_VISITS + 1}) AS INTEGER)"
    c = 1 - q ** (MAX_VISITS + 1)
    return f"CAST(least({MAX_VISITS}, floor(ln(1 - {u} * {c!r}) / {math.log(q)!r})) AS INTEGER)"


def _ratio_for_mean(mean: float) -> float:
    """q whose truncated geometric on 0..MAX_VISITS has the given mean, by bisection on ln q.

    The mean rises monotonically from 0 (q -> 0) to MAX_VISITS (q -> infinity).
    """
    def mean_of(q: float) -> float:
        weights = [q ** k for k in range(MAX_VISITS + 1)]
        return sum(k * w for k, w in enumerate(weights)) / sum(weights)

    lo, hi = -50.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mean_of(math.exp(mid)) < mean:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)
