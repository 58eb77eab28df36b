"""Reconstruction attacks on a table of secret bits: raw DuckDB against dpsql.

    python benchmarks/reconstruction.py [--quick] [--out benchmarks/results/reconstruction.md]
                                        [--plot benchmarks/results/reconstruction.png]

A secret table `people(person_id, secret, age)`: n people, person_id 1..n, a seeded secret bit
each (about half ones) and a public-looking column. The same attack code runs against two
targets through a tiny adapter (`Target.ask(sql) -> float | None`):

  raw    a plain duckdb connection: exact answers.
  dpsql  dpsql.connect(path, policy=attacker_policy(...), analyst="attacker"): the demo's
         defaults (budget epsilon 10, delta 1e-6, 0.5 per query, Laplace) and the default
         reconstruction defence (surcharge 1, automatic subset cap, answer cache). Every query
         sent, answered (and of those, repeated from the cache) and refused is counted (by error
         class); once refused the attack keeps sending until its list is done and then decodes
         from what it got.

Attacks (the papers are cited in docs/PRIVACY.md, "Reconstruction attacks"):
  dn-in, dn-or  Dinur & Nissim, "Revealing information while preserving privacy", PODS 2003:
                m = 4n random subset sums (each person in with probability 1/2), as an IN list
                or as an OR chain of equalities, decoded by the LP
                    minimise sum_i e_i  s.t. |A_i x - a_i| <= e_i, 0 <= x <= 1,
                rounded at 1/2.
  arith         Cohen & Nissim, "Linear Program Reconstruction in Practice", JPC 2020: subsets
                chosen by a pseudo-random arithmetic predicate on the id,
                floor(100 pow(id K, 0.7) + 0.5) = floor(100 pow(id K, 0.7)), for varying K;
                the attacker evaluates the same formula in Python to build the LP rows.
  averaging     Gadotti et al., "When the signal is in the noise", USENIX Security 2019: the same
                single-person SUM asked repeatedly, averaged; bit = average > 1/2.
  difference    the same paper's difference attack: SUM over everyone minus SUM over everyone
                but t; bit = difference > 1/2.

People the attacker got no information about are guessed 0 (the decoder's value for "nothing
known"), so an attack that learns nothing scores the fraction of zeros, never more than the
guessing baseline max(fraction of ones, fraction of zeros).
"""
from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RAW_TARGET = 0.95            # raw DuckDB: at least this fraction of bits recovered
DP_MARGIN = 0.05             # dpsql: at most baseline + this

BUDGET_EPSILON = 10.0
BUDGET_DELTA = 1e-6
QUERY_EPSILON = 0.5


# --- the secret table --------------------------------------------------------------------------

@dataclass
class Secret:
    path: Path
    bits: np.ndarray                      # bits[i] is the secret of person_id i + 1

    @property
    def n(self) -> int:
        return len(self.bits)


def make_secret_db(directory: Path, n: int, seed: int) -> Secret:
    """Write people(person_id 1..n, secret 0/1, age) to a fresh DuckDB file under `directory`."""
    import duckdb

    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, size=n).astype(np.int64)
    ages = rng.integers(18, 90, size=n)
    path = Path(directory) / f"secret-{n}-{seed}-{uuid.uuid4().hex[:8]}.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE people (person_id INTEGER PRIMARY KEY, secret INTEGER NOT NULL, "
                    "age INTEGER NOT NULL)")
        con.executemany("INSERT INTO people VALUES (?, ?, ?)",
                        [(i + 1, int(b), int(a)) for i, (b, a) in enumerate(zip(bits, ages))])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return Secret(path, bits)


def attacker_policy(ledger: Path | str) -> dict[str, Any]:
    """The demo's defaults for the secret table: epsilon 10 / delta 1e-6 lifetime, 0.5 per query,
    under basic composition (the accounting its published results were made with)."""
    return {
        "budget": {"epsilon": BUDGET_EPSILON, "delta": BUDGET_DELTA, "ledger": str(ledger), "accountant": "basic"},
        "defaults": {"epsilon": QUERY_EPSILON, "mechanism": "laplace"},
        "tables": {
            "people": {
                "privacy_unit": "person_id",
                "max_rows_per_unit": 1,
                "columns": {"secret": {"lower": 0, "upper": 1}, "age": {"lower": 0, "upper": 120}},
            },
        },
    }


# --- targets -----------------------------------------------------------------------------------

class Target:
    """What an attack talks to: ask(sql) gives the single number answered, or None if refused."""
    name = "?"

    def __init__(self) -> None:
        self.sent = 0
        self.answered = 0
        self.repeated = 0            # answers that repeated an earlier answer (dpsql's cache), free
        self.refusals: dict[str, int] = {}
        self._last_cached = False

    @property
    def refused(self) -> int:
        return sum(self.refusals.values())

    def ask(self, sql: str) -> float | None:
        self.sent += 1
        try:
            value = self._run(sql)
        except Exception as err:                 # noqa: BLE001 - counted, the attack goes on
            if not self._refusal(err):
                raise
            kind = type(err).__name__
            self.refusals[kind] = self.refusals.get(kind, 0) + 1
            return None
        self.answered += 1
        self.repeated += self._last_cached
        return 0.0 if value is None else float(value)

    def _run(self, sql: str):
        raise NotImplementedError

    def _refusal(self, err: Exception) -> bool:
        return False

    def epsilon_spent(self) -> float | None:
        return None

    def close(self) -> None:
        pass


class RawTarget(Target):
    name = "raw DuckDB"

    def __init__(self, secret: Secret):
        import duckdb

        super().__init__()
        self.con = duckdb.connect(str(secret.path), read_only=True)

    def _run(self, sql: str):
        return self.con.execute(sql).fetchone()[0]

    def close(self) -> None:
        self.con.close()


class DpsqlTarget(Target):
    name = "dpsql"

    def __init__(self, secret: Secret, ledger: Path, rng=None):
        import dpsql

        super().__init__()
        self._dpsql = dpsql
        options = {} if rng is None else {"rng": rng}
        self.con = dpsql.connect(str(secret.path), policy=attacker_policy(ledger), analyst="attacker", **options)

    def _run(self, sql: str):
        cur = self.con.cursor().execute(sql)
        self._last_cached = cur.cached
        return cur.fetchone()[0]

    def _refusal(self, err: Exception) -> bool:
        return isinstance(err, self._dpsql.Error)

    def budget(self) -> dict[str, Any]:
        cur = self.con.cursor().execute("SHOW dpsql.budget")
        return dict(zip([d[0] for d in cur.description], cur.fetchone()))

    def epsilon_spent(self) -> float:
        return float(self.budget()["epsilon_spent"])

    def close(self) -> None:
        self.con.close()


def open_target(kind: str, secret: Secret, directory: Path, rng=None) -> Target:
    if kind == "raw":
        return RawTarget(secret)
    if kind == "dpsql":                           # a fresh ledger: every attack gets the whole budget
        return DpsqlTarget(secret, Path(directory) / f"ledger-{uuid.uuid4().hex}.sqlite", rng=rng)
    raise ValueError(kind)


# --- queries -----------------------------------------------------------------------------------

SUM = "SELECT SUM(secret) FROM people"


@dataclass
class LinearQuery:
    sql: str
    mask: np.ndarray                              # bool per person: who the query sums over


def dn_queries(n: int, m: int, seed: int, variant: str = "in") -> list[LinearQuery]:
    """Dinur–Nissim: m subsets, each person in with probability 1/2 (never empty)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(m):
        mask = rng.random(n) < 0.5
        if not mask.any():
            mask[rng.integers(n)] = True
        ids = (np.flatnonzero(mask) + 1).tolist()
        if variant == "in":
            where = f"person_id IN ({', '.join(map(str, ids))})"
        elif variant == "or":
            where = " OR ".join(f"person_id = {i}" for i in ids)
        else:
            raise ValueError(variant)
        out.append(LinearQuery(f"{SUM} WHERE {where}", mask))
    return out


def arith_selected(i: int, k: float) -> bool:
    """The predicate floor(100 pow(i K, 0.7) + 0.5) = floor(100 pow(i K, 0.7)), as DuckDB computes it."""
    v = 100 * math.pow(i * k, 0.7)
    return math.floor(v + 0.5) == math.floor(v)


def arith_queries(n: int, m: int, seed: int) -> list[LinearQuery]:
    """Cohen–Nissim: the subsets are picked by an arithmetic predicate on the id with a varying K."""
    rng = random.Random(seed)
    out = []
    for _ in range(m):
        k = rng.uniform(1.0, 10.0)
        lit = f"CAST({k!r} AS DOUBLE)"            # a DOUBLE literal, so DuckDB multiplies as Python does
        pred = f"floor(100 * pow(person_id * {lit}, 0.7) + 0.5) = floor(100 * pow(person_id * {lit}, 0.7))"
        mask = np.array([arith_selected(i, k) for i in range(1, n + 1)])
        out.append(LinearQuery(f"{SUM} WHERE {pred} AND person_id BETWEEN 1 AND {n}", mask))
    return out


# --- decoding ----------------------------------------------------------------------------------

def lp_decode(masks: Sequence[np.ndarray], answers: Sequence[float], n: int) -> np.ndarray:
    """Dinur–Nissim LP: minimise sum |A x - a| over 0 <= x <= 1; round at 1/2 (0.5 itself -> 0)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, identity, vstack

    m = len(answers)
    if m == 0:
        return np.zeros(n, dtype=np.int64)
    a = csr_matrix(np.array(masks, dtype=float))
    b = np.asarray(answers, dtype=float)
    eye = identity(m, format="csr")
    a_ub = vstack([hstack([a, -eye]), hstack([-a, -eye])]).tocsr()
    b_ub = np.concatenate([b, -b])
    c = np.concatenate([np.zeros(n), np.ones(m)])
    bounds = [(0, 1)] * n + [(0, None)] * m
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.x is None:
        raise RuntimeError(f"LP decoding failed: {res.message}")
    return (res.x[:n] > 0.5).astype(np.int64)


def recovered(guess: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.asarray(guess) == np.asarray(truth)))


def baseline(truth: np.ndarray) -> float:
    ones = float(np.mean(truth))
    return max(ones, 1 - ones)


# --- attacks -----------------------------------------------------------------------------------

@dataclass
class AttackResult:
    attack: str
    target: str
    n: int
    sent: int
    answered: int
    refusals: dict[str, int]
    epsilon: float | None
    recovered: float
    baseline: float
    curve: list[tuple[int, float]] = field(default_factory=list)   # (queries sent, fraction recovered)
    seconds: float = 0.0
    repeated: int = 0          # of the answered: identical repeats answered again from dpsql's cache

    @property
    def refused(self) -> int:
        return sum(self.refusals.values())

    @property
    def met(self) -> bool:
        if self.target == RawTarget.name:
            return self.recovered >= RAW_TARGET
        return self.recovered <= self.baseline + DP_MARGIN


def linear_attack(target: Target, queries: Sequence[LinearQuery], secret: Secret,
                  checkpoints: Sequence[float] = ()) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Send every query; decode from the answered ones. Optionally decode after each fraction in
    `checkpoints` of the queries sent, for a recovery curve."""
    answers: list[float | None] = [target.ask(q.sql) for q in queries]

    def decode(k: int) -> np.ndarray:
        got = [(q.mask, a) for q, a in zip(queries[:k], answers[:k]) if a is not None]
        return lp_decode([g[0] for g in got], [g[1] for g in got], secret.n)

    curve = []
    for frac in checkpoints:
        k = max(1, round(frac * len(queries)))
        curve.append((k, recovered(decode(k), secret.bits)))
    return decode(len(queries)), curve


def averaging_attack(target: Target, secret: Secret, targets: Sequence[int], repeats: int) -> np.ndarray:
    """Ask SUM(secret) WHERE person_id = t `repeats` times per target (round robin); bit = mean > 1/2."""
    got: dict[int, list[float]] = {t: [] for t in targets}
    for _ in range(repeats):
        for t in targets:
            a = target.ask(f"{SUM} WHERE person_id = {t}")
            if a is not None:
                got[t].append(a)
    return np.array([int(bool(got[t]) and float(np.mean(got[t])) > 0.5) for t in targets])


def difference_attack(target: Target, secret: Secret, targets: Sequence[int]) -> np.ndarray:
    """Per target: SUM over everyone and SUM over everyone but t; bit = difference > 1/2."""
    guess = []
    for t in targets:
        total = target.ask(SUM)
        without = target.ask(f"{SUM} WHERE person_id <> {t}")
        guess.append(int(total is not None and without is not None and total - without > 0.5))
    return np.array(guess)


ATTACKS = ("dn-in", "dn-or", "arith", "averaging", "difference")


def run_attack(attack: str, kind: str, secret: Secret, directory: Path, *, seed: int = 0, rng=None,
               queries_per_person: int = 4, repeats: int = 5,
               checkpoints: Sequence[float] = ()) -> AttackResult:
    """One attack against one target ('raw' or 'dpsql'), all people attacked."""
    n = secret.n
    people = list(range(1, n + 1))
    started = time.perf_counter()
    target = open_target(kind, secret, directory, rng=rng)
    curve: list[tuple[int, float]] = []
    try:
        if attack in ("dn-in", "dn-or"):
            qs = dn_queries(n, queries_per_person * n, seed, variant=attack[3:])
            guess, curve = linear_attack(target, qs, secret, checkpoints)
        elif attack == "arith":
            guess, curve = linear_attack(target, arith_queries(n, queries_per_person * n, seed), secret,
                                         checkpoints)
        elif attack == "averaging":
            guess = averaging_attack(target, secret, people, repeats)
        elif attack == "difference":
            guess = difference_attack(target, secret, people)
        else:
            raise ValueError(attack)
        truth = secret.bits[np.array(people) - 1]
        return AttackResult(attack, target.name, n, target.sent, target.answered, dict(target.refusals),
                            target.epsilon_spent(), recovered(guess, truth), baseline(truth), curve,
                            time.perf_counter() - started, target.repeated)
    finally:
        target.close()


def run(sizes: Sequence[int], directory: Path, *, seed: int = 0, log: Callable[[str], None] = print,
        curve_size: int | None = None) -> list[AttackResult]:
    results = []
    curve_size = max(sizes) if curve_size is None else curve_size
    checkpoints = [0.01, 0.025, 0.05] + [i / 10 for i in range(1, 11)]   # of the 4n queries
    for n in sizes:
        secret = make_secret_db(directory, n, seed + n)
        for attack in ATTACKS:
            for kind in ("raw", "dpsql"):
                r = run_attack(attack, kind, secret, directory, seed=seed + 7 * n,
                               checkpoints=checkpoints if (attack == "dn-in" and n == curve_size) else ())
                log(f"{attack:<10} {r.target:<10} n={n:<4} sent={r.sent:<5} answered={r.answered:<5} "
                    f"repeats={r.repeated:<5} "
                    f"refused={r.refused:<5} eps={_eps(r.epsilon)} recovered={r.recovered:.3f} "
                    f"baseline={r.baseline:.3f} {'met' if r.met else 'MISSED'} ({r.seconds:.1f} s)")
                results.append(r)
    return results


# --- report ------------------------------------------------------------------------------------

NAMES = {"dn-in": "Dinur–Nissim, IN list", "dn-or": "Dinur–Nissim, OR chain",
         "arith": "Cohen–Nissim arithmetic selector", "averaging": "averaging", "difference": "difference"}


def _eps(e: float | None) -> str:
    return "—" if e is None else f"{e:g}"


def _refused(r: AttackResult) -> str:
    if not r.refusals:
        return "0"
    detail = ", ".join(f"{k} {v}" for k, v in sorted(r.refusals.items()))
    return f"{r.refused} ({detail})"


def render(results: Sequence[AttackResult], *, quick: bool = False, seconds: float | None = None) -> str:
    lines = [
        "# Reconstruction attacks: raw DuckDB vs dpsql",
        "",
        f"Generated by `python benchmarks/reconstruction.py{' --quick' if quick else ''}`. Secret table "
        "`people(person_id, secret, age)`, one seeded secret bit per person (about half ones); every person "
        "is attacked. dpsql policy: budget epsilon "
        f"{BUDGET_EPSILON:g}, delta {BUDGET_DELTA:g}, {QUERY_EPSILON:g} per query (Laplace), privacy unit "
        "person_id, max_rows_per_unit 1, secret in [0, 1]; a fresh ledger per attack. Once refused, the "
        "attacks keep sending until their list is done, then decode from the answers they got. People the "
        "attacker learned nothing about are guessed 0.",
        "",
        f"Targets: raw DuckDB recovers ≥ {RAW_TARGET:.0%} of the bits; dpsql recovers at most the guessing "
        f"baseline + {DP_MARGIN * 100:g} points (baseline = max(fraction of ones, fraction of zeros)).",
        "",
        "| attack | target | n | queries sent | answered (of which repeats) | refused | epsilon spent | recovered | baseline | target |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in results:
        want = f"≥ {RAW_TARGET:.0%}" if r.target == RawTarget.name else f"≤ baseline + {DP_MARGIN * 100:g} pts"
        answered = f"{r.answered} ({r.repeated})" if r.repeated else f"{r.answered}"
        lines.append(f"| {NAMES[r.attack]} | {r.target} | {r.n} | {r.sent} | {answered} | {_refused(r)} | "
                     f"{_eps(r.epsilon)} | {r.recovered:.1%} | {r.baseline:.1%} | "
                     f"{'met' if r.met else '**missed**'} ({want}) |")
    missed = [r for r in results if not r.met]
    lines += ["", f"All targets met: {'yes' if not missed else 'no — ' + str(len(missed)) + ' missed'}."]
    dp_missed = sorted({(NAMES[r.attack], r.n) for r in missed if r.target == DpsqlTarget.name})
    if dp_missed:
        lines += ["", "dpsql misses: " + "; ".join(f"{a} at n = {n}" for a, n in dp_missed) + "."]
    lines += ["", "How dpsql stops them. Every query is charged before it runs, and the lifetime budget "
              f"({BUDGET_EPSILON:g}) is finite. A query whose WHERE picks people by identity (person_id =, IN, "
              "OR chains, <>, ranges) is charged its epsilon plus the policy's surcharge (default: as much again), "
              "and counts in a series per population (table, aggregates, other filters); the default cap allows "
              "a quarter of n / log2(n + 1) answers per series, n being the identity values the series named "
              "(between 2 and 16), so the random-subset attacks are refused (QueryRejected) after a handful of "
              "answers, long before the budget runs out. An identical repeat gets the identical answer again, "
              "free (the repeats column), so averaging learns nothing. The arithmetic selector is outside the "
              "accepted subset (no functions or arithmetic in WHERE) and is refused before anything is charged.",
              "", "dpsql's noise comes from the OS CSPRNG, so its rows change from run to run; the refusals and "
              "the counts do not."]
    if seconds is not None:
        lines.append(f"Run time {seconds:.0f} s.")
    lines += [
        "",
        "Attacks: Dinur & Nissim (PODS 2003) random subset sums, m = 4n, LP decoding (scipy linprog, "
        "HiGHS); Cohen & Nissim (JPC 2020) subsets chosen by "
        "`floor(100 * pow(person_id * K, 0.7) + 0.5) = floor(100 * pow(person_id * K, 0.7))` for 4n values of K, "
        "same LP; Gadotti et al. (USENIX Security 2019) averaging (5 repeats of a single-person SUM, round "
        "robin) and difference (SUM over all minus SUM over all but t).",
        "",
    ]
    return "\n".join(lines)


def plot(results: Sequence[AttackResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [r for r in results if r.curve]
    if not curves:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, style in zip(curves, ("o-", "s-", "^-", "v-")):
        xs, ys = zip(*r.curve)
        ax.plot(xs, ys, style, label=f"{r.target} (answered {r.answered} of {r.sent})")
    ax.axhline(curves[0].baseline, linestyle="--", color="grey", label="guessing baseline")
    ax.set_xscale("log")
    ax.set_xlabel("queries sent (log scale)")
    ax.set_ylabel("fraction of secret bits recovered")
    ax.set_ylim(0.3, 1.02)
    ax.set_title(f"Dinur–Nissim (IN list, LP decoding), n = {curves[0].n}")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n = 50 and 100 instead of 100 and 500")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reconstruction.md")
    p.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "results" / "reconstruction.png")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sizes = (50, 100) if args.quick else (100, 500)
    started = time.perf_counter()
    directory = Path(tempfile.mkdtemp(prefix="dpsql-recon-"))
    try:
        results = run(sizes, directory, seed=args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    md = render(results, quick=args.quick, seconds=time.perf_counter() - started)
    print(md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md, encoding="utf-8")
    plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
