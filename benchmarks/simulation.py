"""Accuracy-simulation benchmark: the cost of the simulated 95% half-widths of a derived value.

    python benchmarks/simulation.py [--compare OTHER/dpsql/postprocess/simulate.py] [--repeat 3]

AVG = noisy sum / noisy count is released with a half-width simulated over SIM_DRAWS draws of
the noise per released row (dpsql.postprocess.simulate.simulated_half_widths): for results of 8, 51, 500
and 5,000 rows (the last with draws_for's fewer draws), the best of --repeat timings of each,
milliseconds. --compare times another checkout's simulation module in the same run, interleaved,
and checks that both give the same widths: dpsql/postprocess/simulate.py (typed expression nodes,
from this checkout's dpsql.postprocess.expr), or an older checkout's dpsql/postprocess.py (the
tuple expressions it read). Run it under the environment you care about: glibc's
allocator settings change the result (`dpsql serve` sets them: limits.tune_allocator; docs/PROXY.md
names the environment variables that do the same in-process).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import timeit

import numpy as np

from dpsql import postprocess
from dpsql.postprocess.expr import Avg

ROWS = (8, 51, 500, 5000)
EXPR = Avg("s", "c", 0.0, 500000.0)
TUPLE_EXPR = ("avg", "s", "c", 0.0, 500000.0)     # the same, for a postprocess.py of before the nodes


def _expr(module):
    return TUPLE_EXPR if hasattr(module, "_vector") else EXPR


def _load(path: str):
    spec = importlib.util.spec_from_file_location("dpsql_postprocess_compared", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", help="another checkout's dpsql/postprocess/simulate.py (or, before the "
                    "expression nodes, dpsql/postprocess.py), timed in the same run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    modules = {"this checkout": postprocess}
    if args.compare:
        modules = {"compared": _load(args.compare), **modules}
    malloc = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(f"AVG's simulated half-widths, best of {args.repeat} (ms); load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; allocator environment: {malloc or 'glibc defaults'}\n")
    print("| rows | draws a row | " + " | ".join(f"{name} ms" for name in modules) + " |")
    print("|---:|---:|" + "---:|" * len(modules))
    rng = np.random.default_rng(1)
    for rows in ROWS:
        envs = [{"s": float(rng.normal(0, 1e6)), "c": float(rng.integers(20, 200))} for _ in range(rows)]
        keys = [(f"k{i}",) for i in range(rows)]
        draws = postprocess.noise_draws({"s": ("laplace", 5000.0), "c": ("laplace", 10.0)},
                                        postprocess.draws_for(rows))
        number = max(3, 3000 // rows)
        best = {name: float("inf") for name in modules}
        widths = {}
        for _ in range(args.repeat):
            for name, module in modules.items():      # interleaved
                e = _expr(module)
                t = timeit.timeit(lambda m=module: m.simulated_half_widths(e, envs, draws, keys), number=number)
                best[name] = min(best[name], t / number * 1000)
                widths[name] = module.simulated_half_widths(e, envs, draws, keys)
        if len({repr(w) for w in widths.values()}) != 1:
            print(f"the widths differ at {rows} rows", file=sys.stderr)
            return 1
        print(f"| {rows:,} | {postprocess.draws_for(rows):,} | "
              + " | ".join(f"{best[name]:.2f}" for name in modules) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
