"""Changes caught under scheduler_speed's constraints, against the constrained limit.

    python -m benchmarks.constrained_quality                    # realistic, 100k URLs
    python -m benchmarks.constrained_quality --mix heavy --seeds 1,2,3,4,5,6

A simulation of ``bayes`` on the kind of constraints ``scheduler_speed --constraints`` times,
at a size where the relevel serves (from ``RELEVEL_FROM`` URLs on): n URLs with its Zipf
change probabilities per slot, C = n / 100, hosts of Zipf sizes and bounds on some URLs as
its mixes set them, but n / 100 hosts in the realistic mix (at n / 1,000 hosts every host of
a 100,000-URL run is among the 100 capped, and the budget cannot be spent). Each slot the
pages change with their probability, the selection is polled and fed back (a hit where the
page changed since its last poll). Reported per seed: the changes caught per slot over the
last three quarters of the run as a share of the constrained limit on the true
probabilities, the share in each quarter, the median count of due rows (stride credit >= 1)
after a slot, and the relevels run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.scheduler_speed import _rates
from crawler import schedulers
from crawler.schedulers import Limits, bayes, constrained_limit


def build(n: int, seed: int, mix: str) -> tuple[bayes.BayesRate, Limits]:
    """``bayes`` with n new URLs under the mix's hosts, caps and bounds, and those limits."""
    sched = schedulers.create("bayes", capacity=n / 100, seed=seed)
    assert isinstance(sched, bayes.BayesRate)
    ids = np.arange(n, dtype=np.int64)
    sched.add(ids)
    rng = np.random.default_rng(seed + 1)
    heavy = mix == "heavy"
    hosts = max(1, n // 40 if heavy else n // 100)
    share = 1.0 / np.arange(1, hosts + 1)
    host = rng.choice(hosts, size=n, p=share / share.sum())
    caps = {h: 1.5 for h in range(hosts if heavy else min(100, hosts))}
    sched.set_groups(ids, host)
    sched.set_group_caps(caps)
    bounded = rng.permutation(n)[: max(2, n // 50 if heavy else n // 100)]
    half = bounded.size // 2
    sched.set_bounds(ids[bounded[:half]], lower=0.01)
    sched.set_bounds(ids[bounded[half:]], upper=0.1)
    lower, upper = np.zeros(n), np.ones(n)
    lower[bounded[:half]], upper[bounded[half:]] = 0.01, 0.1
    return sched, Limits.build(n, host, caps, lower, upper)


def run(n: int, slots: int, mix: str, seed: int) -> dict[str, Any]:
    """One seed's run (see the module docstring)."""
    p = _rates(n)
    sched, limits = build(n, seed, mix)
    limit = constrained_limit(p, n / 100, limits=limits)
    rng = np.random.default_rng(100 + seed)
    changed = np.zeros(n, dtype=bool)
    caught = np.zeros(slots)
    due = np.zeros(slots)
    relevels = 0
    for t in range(slots):
        changed |= rng.random(n) < p
        # internals read for the diagnostics only: a relevel moves the level between solves
        level, since = sched._level, sched._since_solve
        ids = sched.select()
        relevels += sched._level != level and sched._since_solve == since + 1
        hits = changed[ids]
        changed[ids] = False
        caught[t] = hits.sum()
        sched.feedback(ids, hits)
        due[t] = np.count_nonzero(sched._credit >= 1.0)
    quarter = max(1, slots // 4)
    return {
        "share": float(caught[quarter:].mean() / limit),
        "quarters": [
            float(caught[a : a + quarter].mean() / limit) for a in range(0, slots, quarter)
        ],
        "due": float(np.median(due)),
        "relevels": relevels,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", type=float, default=1e5, help="URLs")
    parser.add_argument("--slots", type=int, default=2000)
    parser.add_argument("--mix", choices=("realistic", "heavy"), default="realistic")
    parser.add_argument("--seeds", default="1,2,3,4,5,6")
    args = parser.parse_args(argv)
    n = int(args.size)
    shares = []
    for seed in (int(s) for s in args.seeds.split(",")):
        started = time.perf_counter()
        row = run(n, args.slots, args.mix, seed)
        shares.append(row["share"])
        quarters = " ".join(f"{q:.4f}" for q in row["quarters"])
        print(
            f"seed {seed}: {row['share']:.4f} of the constrained limit after the first quarter "
            f"(quarters {quarters}), due rows median {row['due']:.0f}, "
            f"relevels {row['relevels']} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(f"{args.mix}, {n:,} URLs, {args.slots} slots: mean {np.mean(shares):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
