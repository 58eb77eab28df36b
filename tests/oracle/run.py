"""Running the oracles over generated queries: the databases (the data in DuckDB and PostgreSQL,
and DuckDB neighbours each without one unit), and a tally (accepted, refused and why, errors,
shapes, mismatches per oracle) shared by the CI tests and benchmarks/oracle.py."""
from __future__ import annotations

import contextlib
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.oracle import generator, oracles, schema
from tests.oracle.oracles import Mismatch, Target

ORACLES = ("error", "value", "sensitivity", "agree", "metamorphic")
SUMMARIES: list[str] = []      # printed in the terminal summary (tests/oracle/conftest.py)


@dataclass
class Tally:
    generated: int = 0
    accepted: int = 0
    refused: Counter = field(default_factory=Counter)
    shapes: set = field(default_factory=set)
    features: Counter = field(default_factory=Counter)
    checked: Counter = field(default_factory=Counter)        # oracle -> checks run
    mismatches: dict = field(default_factory=lambda: {o: [] for o in ORACLES})
    engines: list = field(default_factory=list)
    sensitivity: dict = field(default_factory=dict)          # ratio: the largest move / charged Linf

    def add(self, found: list[Mismatch]) -> None:
        for m in found:
            self.mismatches[m.oracle].append(m)

    def all(self) -> list[Mismatch]:
        return [m for o in ORACLES for m in self.mismatches[o]]


def neighbour_units(data: dict, seed: int) -> list[int]:
    """The unit with the most rows, and one drawn by the seed."""
    counts = schema.rows_per_unit(data)
    most = max(counts, key=lambda u: (counts[u], -u))
    other = random.Random(seed).choice(sorted(u for u in counts if u != most))
    return [most, other]


@contextlib.contextmanager
def databases(directory: Path, data_seed: int, engines: list[str], pg_server: str | None = None,
              customers: int = 240, neighbours: bool = True):
    """Targets {engine: Target} on the seeded data, and DuckDB neighbours {unit: Target}."""
    from tests.conftest import copy_to_postgres, postgres_database
    directory.mkdir(parents=True, exist_ok=True)
    data = schema.generate(data_seed, customers)
    path = directory / f"oracle_{data_seed}.duckdb"
    if not path.exists():
        schema.write_duckdb(path, data)
    opened: list[Target] = []

    def target(engine, location, name):
        t = Target(engine, location, schema.policy(str(directory / f"ledger_{name}_{os.getpid()}.sqlite")))
        opened.append(t)
        return t
    with contextlib.ExitStack() as stack:
        try:
            locations = {}
            for engine in engines:         # PostgreSQL first: its copy reads the DuckDB file
                if engine == "postgres":
                    assert pg_server is not None, "postgres needs a server URL"
                    dsn = stack.enter_context(postgres_database(pg_server, f"dpsql_oracle_{os.getpid()}_{data_seed}"))
                    copy_to_postgres(str(path), dsn)
                    locations["postgres"] = dsn
                elif engine == "duckdb":
                    locations["duckdb"] = str(path)
                else:
                    raise ValueError(f"unknown engine {engine!r}")
            targets = {e: target(e, locations[e], e) for e in engines}
            near = {}
            if neighbours and "duckdb" in engines:
                for u in neighbour_units(data, data_seed):
                    p = directory / f"oracle_{data_seed}_without_{u}.duckdb"
                    if not p.exists():
                        schema.write_duckdb(p, schema.without_unit(data, u))
                    near[u] = target("duckdb", str(p), f"without_{u}")
            yield targets, near
        finally:
            for t in opened:
                t.close()


def run_cases(seeds, targets: dict[str, Target], near: dict[int, Target], tally: Tally,
              sensitivity_every: int = 1) -> None:
    """Every oracle on each generated query: value on each engine, agree between engines,
    sensitivity on DuckDB against each neighbour (on every sensitivity_every-th query)."""
    for n, seed in enumerate(seeds):
        case = generator.case(seed)
        tally.generated += 1
        tally.shapes.add(case.shape)
        tally.features.update(case.features)
        rels = {}
        for engine, t in targets.items():
            rel = rels[engine] = t.release(case.sql)
            if rel.status == "refused":
                tally.refused[rel.reason] += 1
            elif rel.status == "error":
                tally.add([Mismatch("error", engine, case.sql, rel.reason)])
            else:
                tally.checked["value"] += 1
                try:
                    tally.add(oracles.check_value(case, rel, t))
                except Exception as err:       # the plain query failed: report, do not hide
                    tally.add([Mismatch("value", engine, case.sql, f"plain query failed: {type(err).__name__}: {err}")])
        if all(r.status == "ok" for r in rels.values()):
            tally.accepted += 1
        if "duckdb" in rels and "postgres" in rels:
            tally.checked["agree"] += 1
            tally.add(oracles.check_agree(case, rels["duckdb"], rels["postgres"]))
        base = rels.get("duckdb")
        if base is not None and base.status == "ok" and n % sensitivity_every == 0 and \
                oracles.measures(case, base.plan):
            for u, t in near.items():
                tally.checked["sensitivity"] += 1
                tally.add(oracles.check_sensitivity(case, base, t.release(case.sql), "duckdb", u,
                                                    tally.sensitivity))


def run_pairs(seeds, targets: dict[str, Target], tally: Tally) -> None:
    for seed in seeds:
        p = generator.pair(seed)
        tally.shapes.add(p.whole.shape)
        tally.features.update(p.whole.features)
        for engine, t in targets.items():
            whole = t.release(p.whole.sql)
            parts = [t.release(c.sql) for c in p.parts]
            for c, r in [(p.whole, whole)] + list(zip(p.parts, parts)):
                if r.status == "error":
                    tally.add([Mismatch("error", engine, c.sql, r.reason)])
            tally.checked["metamorphic"] += 1
            tally.add(oracles.check_pair(p, whole, parts, engine))


def summary(tally: Tally) -> str:
    lines = [f"oracle: {tally.generated} queries generated, {tally.accepted} accepted on every engine, "
             f"{sum(tally.refused.values())} refusals, {len(tally.shapes)} distinct shapes "
             f"(shape = the set of features: FROM form, aggregates, expression forms, key forms, clauses)"]
    lines.append("checks run: " + ", ".join(f"{o} {tally.checked[o]}" for o in ORACLES if o != "error"))
    lines.append(f"largest move of a measure without one unit / its charged Linf: "
                 f"{tally.sensitivity.get('ratio', 0.0):.3f}")
    lines.append("mismatches: " + ", ".join(f"{o} {len(tally.mismatches[o])}" for o in ORACLES))
    for reason, n in tally.refused.most_common(5):
        lines.append(f"  refused x{n}: {reason}")
    return "\n".join(lines)
