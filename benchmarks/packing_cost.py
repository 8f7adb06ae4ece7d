"""The coordinator's packing cost at 1k, 10k, 100k and 1M sites.

    python -m benchmarks.packing_cost                     # 100 workers
    python -m benchmarks.packing_cost --sizes 1000,10000 --workers 20 --repeat 5

Sites get Zipf-like weights (a few heavy, a long light tail: site sizes on the web are
heavy-tailed), none above half the smallest worker, scaled so that they fill the workers
to 90% on average; workers have capacities 1,000, 1,500 and 2,000 polls per slot in turn
(a mixed fleet). Timed, median of ``--repeat``:

- ``bfd``: a full Best Fit Decreasing pack of every site (a coordinator starting cold);
- ``repack``: after 1% of the sites drift (weight times a factor in [0.5, 2]), the
  incremental re-pack (shed by subset sum from the workers now over, re-place by BFD);
  reported with the sites and weight it moved, next to the least weight any re-pack
  must move (the excess of the overloaded workers; equal to ours where they hold at
  most 32 sites);
- ``weights``: summing URL frequencies into site weights (``site_weights``) for 10 URLs
  per site, the step before either.

Progress goes to stderr, one JSON document per size to stdout with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from crawler.cluster import best_fit_decreasing, repack, site_weights

FILL = 0.9
DRIFT = 0.01
URLS_PER_SITE = 10


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    sizes = [int(float(size)) for size in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    for n in sizes:
        _log(f"{n:,} sites on {args.workers} workers ...")
        row = measure(n, args.workers, args.repeat, seed=args.seed)
        rows.append(row)
        _log(
            f"  bfd {row['bfd_ms']:.1f} ms, repack after {DRIFT:.0%} drift "
            f"{row['repack_ms']:.1f} ms (moved {row['moved_sites']:,} sites, "
            f"{row['moved_share']:.3%} of the weight; any re-pack must move at least "
            f"{row['least_share']:.3%}), site weights from "
            f"{n * URLS_PER_SITE:,} URLs {row['weights_ms']:.1f} ms"
        )
        if args.json:
            sys.stdout.write(json.dumps(row) + "\n")
    if not args.json:
        _table(rows)
    return 0


def measure(n: int, workers: int, repeat: int, *, seed: int = 0) -> dict[str, Any]:
    """Time the three steps at ``n`` sites (see the module docstring)."""
    rng = np.random.default_rng(seed)
    caps = np.resize(np.array([1.0, 1.5, 2.0]), workers) * 1000.0
    raw = 1.0 / np.arange(1, n + 1) ** 0.8
    rng.shuffle(raw)
    # no site above half the smallest worker (a bigger one gets its own worker or a
    # bigger worker; BFD would open a bin for it), then the fleet 90% full on average
    weights = raw * (FILL * caps.sum() / raw.sum())
    for _ in range(20):
        weights = np.minimum(weights, 0.5 * caps.min())
        weights *= FILL * caps.sum() / weights.sum()
    weights = np.minimum(weights, 0.5 * caps.min())
    bfd_times = _timed(lambda: best_fit_decreasing(weights, caps), repeat)
    start = best_fit_decreasing(weights, caps)
    assignment = start.onto_workers()
    drifted = weights.copy()
    changed = rng.choice(n, max(1, int(n * DRIFT)), replace=False)
    drifted[changed] *= rng.uniform(0.5, 2.0, changed.size)
    repack_times = _timed(lambda: repack(assignment, drifted, caps), repeat)
    result = repack(assignment, drifted, caps)
    x = rng.random(n * URLS_PER_SITE)
    site_of_url = np.repeat(np.arange(n), URLS_PER_SITE)
    weights_times = _timed(lambda: site_weights(x, site_of_url, n), repeat)
    return {
        "sites": n,
        "workers": workers,
        "bfd_ms": statistics.median(bfd_times) * 1e3,
        "fill": float(weights.sum() / caps.sum()),
        "bfd_opened": start.opened,
        "repack_ms": statistics.median(repack_times) * 1e3,
        "moved_sites": result.moved_sites,
        "moved_share": result.moved_weight / float(drifted.sum()),
        "least_share": result.lower_bound / float(drifted.sum()),
        "repack_shortfall": None if result.shortfall is None else result.shortfall.workers,
        "weights_ms": statistics.median(weights_times) * 1e3,
        "drifted_sites": int(changed.size),
    }


def _timed(step: Callable[[], object], repeat: int) -> list[float]:
    out: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        out.append(time.perf_counter() - started)
    return out


def _table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'sites':>10} {'bfd ms':>10} {'repack ms':>10} {'moved':>8} {'moved w':>8} "
        f"{'weights ms':>11}"
    )
    for r in rows:
        print(
            f"{r['sites']:>10,} {r['bfd_ms']:>10.1f} {r['repack_ms']:>10.1f} "
            f"{r['moved_sites']:>8,} {r['moved_share']:>8.3%} {r['weights_ms']:>11.1f}"
        )


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line per size")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
