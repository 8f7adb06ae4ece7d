"""Time of one constrained solve (budget, host caps) at n = 10k, 100k, 1M URLs.

    python -m benchmarks.constrained_solver                     # 10k and 100k
    python -m benchmarks.constrained_solver --sizes 1000000 --repeats 1

The instance: change probabilities Zipf(0.5, 0.8) over n URLs, dealt at random onto n / 40
hosts of Zipf sizes (host j holds a share proportional to 1 / j), every host capped at 1.5
polls per slot, C = n / 100; with equal weights and with importance weights drawn uniformly
in [0.05, 1]. Per case: the best of ``--repeats`` wall times of ``constrained_fill`` (the
whole solve: every host's own level, then the global level), the number of evaluations of
the allocation curve over the URLs (each is one O(n) pass; the cost of a solve is about
that many passes), the polls allocated and the number of hosts whose cap binds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from crawler.schedulers._fill import Curve, constrained_fill, optimum_curve
from crawler.schedulers._limits import Limits


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated n")
    parser.add_argument("--repeats", type=int, default=3, help="solves per case [3]")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print("| n | weights | seconds | curve evaluations | polls allocated | caps binding |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in (int(float(size)) for size in args.sizes.split(",")):
        for weighted in (False, True):
            row = _measure(n, weighted, args.repeats, args.seed)
            print(
                f"| {n:,} | {'importance' if weighted else 'equal'} | {row['seconds']:.3f} "
                f"| {row['evaluations']} | {row['allocated']:.3f} | {row['binding']} |"
            )
            sys.stdout.flush()
    return 0


def _measure(n: int, weighted: bool, repeats: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    p = 0.5 / np.arange(1, n + 1, dtype=np.float64) ** 0.8
    r = -np.log1p(-p)
    w = rng.uniform(0.05, 1.0, n) if weighted else None
    hosts = max(1, n // 40)
    share = 1.0 / np.arange(1, hosts + 1)
    groups = rng.choice(hosts, size=n, p=share / share.sum())
    limits = Limits.build(n, groups, {h: 1.5 for h in range(hosts)})
    inner, top = optimum_curve(r, w)
    calls = 0

    class Counted(Curve):
        def subset(self, rows: Any) -> Curve:
            part = inner.subset(rows)
            return Counted(part.r, part.importance)

        def __call__(self, level: Any) -> Any:
            nonlocal calls
            calls += 1
            return super().__call__(level)

    curve = Counted(inner.r, inner.importance)

    best = float("inf")
    solved = None
    for _ in range(max(1, repeats)):
        calls = 0
        started = time.perf_counter()
        solved = constrained_fill(curve, top, n / 100.0, limits)
        best = min(best, time.perf_counter() - started)
    assert solved is not None
    return {
        "seconds": best,
        "evaluations": calls,
        "allocated": float(solved.x.sum()),
        "binding": int(solved.binding.sum()),
    }


if __name__ == "__main__":
    raise SystemExit(main())
