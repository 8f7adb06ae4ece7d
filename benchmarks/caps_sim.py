"""The live caps benchmark's site, simulated: where the share of the capped limit goes.

    python -m benchmarks.caps_sim                          # bayes and the oracle, 10 seeds
    python -m benchmarks.caps_sim --start-delay 17 --no-baseline
    python -m benchmarks.caps_sim --schedulers bayes --param capped_rule=stride

``benchmarks/caps_live.py`` runs the service for 10 minutes per figure; this runs the same
site (its ``Config``: 400 URLs on 20 hosts, 3 of them holding 60 %, Zipf(0.6, 0.8) change
probabilities per 2 s slot, C = 24, every host capped at the 1.8 polls per slot the
service derives) in a second per seed, with the two things the live run has and a plain
simulation does not:

- **baseline polls**: the service's first good answer of a URL has nothing to compare with,
  so it gives the scheduler no feedback and the site counts no change seen (``--no-baseline``
  feeds it back as a hit or miss, as a plain simulation does);
- **a start delay**: the site changes from wall slot 0, the service polls from its first
  slot (``--start-delay`` slots later; 6-17 live, by the machine's load);
- **Last-Modified**: each poll tells the version's age, as the live site's header does
  (the poll at a uniform time in its slot, the service's whole-second conversion taking
  half a slot off, a first poll's age of half a slot or less unknown: ``LastChanges``);
  ``--no-last-modified`` gives none.

Reported per scheduler: the share of the capped limit over the window (wall slots 100-300 by
default, as the live benchmark's short learning window), mean and lowest over the seeds, per
50-slot window, and the changes caught per slot on the three big (capped, binding) hosts and
on the rest. The oracle (``optimal``, given the true rates) under the same caps, baselines
and delay is the ceiling for any learner.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.caps_live import Config
from crawler import schedulers
from crawler.schedulers import Limits, constrained_limit


@dataclass(frozen=True)
class Run:
    """One seed's result."""

    share: float
    windows: list[float]
    big: float
    small: float


def simulate(
    name: str,
    seed: int,
    *,
    slots: int = 300,
    window: tuple[int, int] = (100, 300),
    cap: float = 1.8,
    start_delay: int = 10,
    baseline: bool = True,
    last_modified: bool = True,
    params: dict[str, Any] | None = None,
) -> Run:
    """One run of the site under ``name`` (see the module docstring), created with
    ``params``."""
    cfg = Config()
    p, host = cfg.layout()
    n = p.size
    caps = {h: cap for h in range(cfg.hosts)}
    bound = constrained_limit(p, cfg.capacity, limits=Limits.build(n, host, caps))
    sched = schedulers.create(name, capacity=cfg.capacity, seed=seed, **(params or {}))
    ids = np.arange(n, dtype=np.int64)
    sched.add(ids, rates=p if sched.needs_rates else None)
    sched.set_groups(ids, host)
    sched.set_group_caps(caps)
    rng = np.random.default_rng(1000 + seed)
    big = host < cfg.big_hosts
    changed = np.zeros(n, dtype=bool)
    polled = np.zeros(n, dtype=bool)
    # each page's last change (slot), its first version as old as the live site draws it
    since = -np.random.default_rng([seed, 1]).geometric(np.clip(p, 1e-9, 1.0)).astype(float)
    caught = np.zeros(slots)
    caught_big = np.zeros(slots)
    for t in range(slots):
        fresh = rng.random(n) < p
        changed |= fresh
        since[fresh] = t
        if t < start_delay:
            continue
        chosen = sched.select()
        hits = changed[chosen]
        changed[chosen] = False
        first = ~polled[chosen] if baseline else np.zeros(chosen.size, dtype=bool)
        polled[chosen] = True
        seen = hits & ~first
        caught[t] = seen.sum()
        caught_big[t] = (seen & big[chosen]).sum()
        if not last_modified:
            sched.feedback(chosen[~first], hits[~first])
            continue
        raw = t - since[chosen] + rng.random(chosen.size)  # slots, at the poll's time
        ago = np.maximum(raw - 0.5, 0.0)
        sched.feedback(chosen[~first], hits[~first], changed_ago=ago[~first])
        sched.first_polls(chosen[first], np.where(raw > 0.5, ago, np.nan)[first])
    a, b = window
    return Run(
        share=float(caught[a:b].mean() / bound),
        windows=[float(caught[w : w + 50].mean() / bound) for w in range(0, slots - 49, 50)],
        big=float(caught_big[a:b].mean()),
        small=float(caught[a:b].mean() - caught_big[a:b].mean()),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--schedulers", default="bayes,optimal")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--slots", type=int, default=300)
    parser.add_argument("--window", default="100,300", help="wall slots a,b")
    parser.add_argument("--cap", type=float, default=1.8)
    parser.add_argument("--start-delay", type=int, default=10)
    parser.add_argument("--no-baseline", action="store_true", help="feed the first poll back")
    parser.add_argument("--no-last-modified", action="store_true", help="no version ages")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of bayes (repeatable; VALUE read as JSON, else text)",
    )
    args = parser.parse_args(argv)
    params = dict(_param(text) for text in args.param)
    a, b = (int(v) for v in args.window.split(","))
    print(
        f"caps_live's site simulated: cap {args.cap:g}, start delay {args.start_delay} slots, "
        f"baseline polls {'fed back' if args.no_baseline else 'without feedback'}, "
        f"Last-Modified {'not sent' if args.no_last_modified else 'sent'}, "
        f"share of the capped limit over wall slots {a}-{b}, {args.seeds} seeds"
    )
    print()
    print("| scheduler | share (mean) | lowest | per 50-slot window | big hosts / slot | rest |")
    print("|---|---:|---:|---|---:|---:|")
    for name in args.schedulers.split(","):
        runs = [
            simulate(
                name,
                seed,
                slots=args.slots,
                window=(a, b),
                cap=args.cap,
                start_delay=args.start_delay,
                baseline=not args.no_baseline,
                last_modified=not args.no_last_modified,
                params=params if name == "bayes" else None,
            )
            for seed in range(args.seeds)
        ]
        if name == "bayes" and params:
            name += " " + " ".join(f"{k}={v}" for k, v in params.items())
        windows = " ".join(f"{v:.2f}" for v in np.mean([r.windows for r in runs], axis=0))
        print(
            f"| {name} | {np.mean([r.share for r in runs]):.3f} "
            f"| {min(r.share for r in runs):.3f} | {windows} "
            f"| {np.mean([r.big for r in runs]):.2f} | {np.mean([r.small for r in runs]):.2f} |"
        )
    return 0


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise SystemExit(f"--param needs KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


if __name__ == "__main__":
    sys.exit(main())
