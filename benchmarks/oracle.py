"""The differential-correctness oracle, long mode: thousands of generated queries.

    python benchmarks/oracle.py --queries 3000 --seed 1 --engines duckdb,postgres

Runs tests/oracle's generator and oracles (value, sensitivity, agree, metamorphic; see
tests/oracle/oracles.py) over seeds seed*1_000_000 + 0..queries-1 (and queries/10 metamorphic
pairs), prints a table (queries generated, accepted, refused with the top reasons, distinct
shapes, mismatches per oracle, mismatch classes with an example SQL each) and writes it to
benchmarks/results/oracle.md (--out). PostgreSQL: $DPSQL_TEST_POSTGRES or --postgres (default
postgresql://postgres@127.0.0.1:5432/test); a database dpsql_oracle_<pid>_<seed> is created and
dropped.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.oracle import run  # noqa: E402
from tests.oracle.oracles import Mismatch  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "oracle.md"


def run_oracle(queries: int, seed: int, engines: list[str], directory: Path, *, pairs: int | None = None,
               postgres: str | None = None, data_seed: int | None = None, sensitivity_every: int = 1,
               log=print) -> run.Tally:
    """Every oracle over `queries` generated queries (and `pairs` metamorphic pairs)."""
    pairs = max(1, queries // 10) if pairs is None else pairs
    base = seed * 1_000_000
    tally = run.Tally()
    logging.disable(logging.CRITICAL)       # dpsql logs each InternalError's traceback
    try:
        with run.databases(directory, seed if data_seed is None else data_seed, engines, postgres) as (targets, near):
            tally.engines = engines
            step = 250
            for start in range(0, queries, step):
                run.run_cases(range(base + start, base + min(queries, start + step)), targets, near, tally,
                              sensitivity_every=sensitivity_every)
                log(f"  {min(queries, start + step)}/{queries} queries, "
                    f"{sum(len(v) for v in tally.mismatches.values())} mismatches")
            run.run_pairs(range(base + 900_000, base + 900_000 + pairs), targets, tally)
    finally:
        logging.disable(logging.NOTSET)
    return tally


def mismatch_class(m: Mismatch) -> str:
    """A mismatch's class: its oracle and its message with numbers and group keys blanked."""
    d = re.sub(r"group \(.*?\) ", "", m.detail)
    d = re.sub(r"\[\(.*\)\]", "[...]", d)
    d = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", d)
    return f"{m.oracle}: {d[:110]}"


def render(tally: run.Tally, *, queries: int, seed: int, seconds: float, examples: int = 3, extra: str = "") -> str:
    n_engines = max(1, len(tally.engines))
    refused = sum(tally.refused.values())
    lines = [
        "# dpsql differential-correctness oracle",
        "",
        f"`python benchmarks/oracle.py --queries {queries} --seed {seed} --engines {','.join(tally.engines)}"
        f"{extra}`: "
        f"{seconds:.0f} s on {platform.machine()} ({os.cpu_count()} cores shared), Python "
        f"{platform.python_version()}. Epsilon 1e9 per query on data bounding leaves alone "
        "(tests/oracle/schema.py); oracles in tests/oracle/oracles.py.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| queries generated | {tally.generated} |",
        f"| engines | {', '.join(tally.engines)} |",
        f"| accepted on every engine | {tally.accepted} |",
        f"| refused (query x engine) | {refused} ({100 * refused / max(1, tally.generated * n_engines):.1f}%) |",
        f"| distinct shapes | {len(tally.shapes)} |",
        f"| largest move without one unit / charged Linf | {tally.sensitivity.get('ratio', 0.0):.3f} |",
    ]
    for o in run.ORACLES:
        checked = "" if o == "error" else f" of {tally.checked[o]} checks"
        lines.append(f"| mismatches: {o} | {len(tally.mismatches[o])}{checked} |")
    lines += ["", "## Top refusal reasons", ""]
    lines += [f"- {n} x {r}" for r, n in tally.refused.most_common(5)] or ["- none"]
    classes: Counter = Counter()
    first: dict[str, Mismatch] = {}
    engines: dict[str, set] = {}
    for m in tally.all():
        c = mismatch_class(m)
        classes[c] += 1
        first.setdefault(c, m)
        engines.setdefault(c, set()).add(m.engine)
    lines += ["", "## Mismatch classes", "", "| count | engines | class | first SQL |", "|---:|---|---|---|"]
    for c, n in classes.most_common():
        sql = first[c].sql.replace("|", "\\|")
        lines.append(f"| {n} | {', '.join(sorted(engines[c]))} | {c.replace('|', '/')} | `{sql}` |")
    if not classes:
        lines.append("| 0 | | none | |")
    lines += ["", "## First mismatches per oracle", ""]
    for o in run.ORACLES:
        for m in tally.mismatches[o][:examples]:
            lines += [f"- **{o}/{m.engine}**: {m.detail}", f"  `{m.sql}`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--engines", default="duckdb,postgres")
    ap.add_argument("--pairs", type=int, default=None, help="metamorphic pairs (default queries/10)")
    ap.add_argument("--postgres", default=os.environ.get("DPSQL_TEST_POSTGRES",
                                                          "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--sensitivity-every", type=int, default=1,
                    help="the sensitivity oracle on every n-th query (it runs each query twice more)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dpsql_oracle_") as tmp:
        tally = run_oracle(args.queries, args.seed, engines, Path(tmp), pairs=args.pairs,
                           postgres=args.postgres if "postgres" in engines else None,
                           sensitivity_every=args.sensitivity_every)
    md = render(tally, queries=args.queries, seed=args.seed, seconds=time.monotonic() - start,
                extra=f" --sensitivity-every {args.sensitivity_every}" if args.sensitivity_every != 1 else "")
    print(md)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(md)
    return 1 if tally.all() else 0


if __name__ == "__main__":
    sys.exit(main())
