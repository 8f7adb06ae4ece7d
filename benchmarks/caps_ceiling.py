"""What any learner could catch on the capped hosts of the live caps benchmark's site.

    python -m benchmarks.caps_ceiling              # 6 seeds, wall slots 100-300
    python -m benchmarks.caps_ceiling --seeds 10 --window 100,300

``benchmarks/caps_sim.py`` showed that `bayes` reached about 0.88 of the capped limit in the
short learning window, and that the loss is on the three big capped hosts (80 URLs each, at
most 1.8 polls per slot): 2.8 changes per slot against the 3.46 their caps allow (with its
capped-host rule since, 0.91 and 2.99; ``capped_rule=stride`` is the rule of before). This asks
how much of that gap is learnable at all. On those hosts only, under the same site, caps,
baseline polls (a URL's first answer catches nothing and teaches nothing) and start delay,
it runs a learner that polls, on each host, the URLs most likely to have changed since their
last poll under its posterior (``1 - E[(1 - p)^age]``), with the exact likelihood of every
observation on a grid of per-slot change probabilities, and one of several priors:

- ``population``: the site's exact population of change probabilities (the multiset of
  p_i, not which URL has which): more than any real scheduler is told;
- generic priors a service could ship: log-uniform over [1e-3, 1] or [1e-4, 1], uniform;

next to the same rule given the true p_i (the myopic oracle, which reaches the caps' limit)
and to polling in turn. Every never-polled URL is polled first (its baseline), as early as
the cap allows. What it prints is catches per slot on the big hosts over the window, and
the share of the capped limit the whole site would reach if the other hosts kept what
`bayes` catches on them in ``caps_sim`` (the big hosts are where the two differ).

Pure NumPy, no I/O: a second or two per seed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from benchmarks.caps_live import Config
from benchmarks.caps_sim import simulate
from crawler.schedulers import Limits, constrained_limit, limit

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
#: scores each URL of one host: (rows, slots since each was last polled) -> score
Score = Callable[[IntArray, IntArray], FloatArray]


def polls_in_slot(t: int, cap: float) -> int:
    """Whole polls a host capped at ``cap`` takes in slot ``t`` (1.8: 2, 2, 2, 2, 1, ...)."""
    return int(np.floor((t + 1) * cap + 1e-9) - np.floor(t * cap + 1e-9))


def run(
    policy: str,
    seed: int,
    grid: FloatArray,
    prior: FloatArray,
    *,
    slots: int = 300,
    window: tuple[int, int] = (100, 300),
    cap: float = 1.8,
    start_delay: int = 10,
) -> float:
    """Changes caught per slot on the big hosts over ``window`` under ``policy``."""
    cfg = Config()
    p, host = cfg.layout()
    rng = np.random.default_rng(1000 + seed)
    n = p.size
    big_hosts = [np.flatnonzero(host == h) for h in range(cfg.big_hosts)]
    changed = np.zeros(n, dtype=bool)
    last = np.full(n, -1, dtype=np.int64)
    log_post = np.tile(np.log(prior), (n, 1))
    caught = np.zeros(slots)

    def posterior_change(rows: IntArray, age: IntArray) -> FloatArray:
        w = np.exp(log_post[rows] - log_post[rows].max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        return np.asarray((w * (1.0 - (1.0 - grid[None, :]) ** age[:, None])).sum(axis=1))

    scores: dict[str, Score] = {
        "oracle": lambda rows, age: 1.0 - (1.0 - p[rows]) ** age,
        "posterior": posterior_change,
        "in turn": lambda rows, age: age.astype(np.float64),
    }
    score = scores[policy]
    for t in range(slots):
        changed |= rng.random(n) < p
        if t < start_delay:
            continue
        k = polls_in_slot(t, cap)
        for rows in big_hosts:
            never = rows[last[rows] < 0]
            if never.size:
                pick = never[:k]
            else:
                ranked = np.argsort(-score(rows, t - last[rows]), kind="stable")
                pick = rows[ranked[:k]]
            for u in pick.tolist():
                if last[u] >= 0:
                    hit = bool(changed[u])
                    caught[t] += hit
                    seen = 1.0 - (1.0 - grid) ** (t - last[u])
                    log_post[u] += np.log(seen if hit else np.maximum(1.0 - seen, 1e-300))
                changed[u] = False
                last[u] = t
    a, b = window
    return float(caught[a:b].mean())


def priors(p: FloatArray) -> dict[str, tuple[FloatArray, FloatArray]]:
    """The priors compared: name -> (grid of per-slot change probabilities, weights)."""
    values, counts = np.unique(p, return_counts=True)
    return {
        "population (told)": (values, counts.astype(np.float64)),
        "log-uniform [1e-3, 1]": (np.geomspace(1e-3, 0.999, 60), np.ones(60)),
        "log-uniform [1e-4, 1]": (np.geomspace(1e-4, 0.999, 60), np.ones(60)),
        "uniform [0, 1]": (np.linspace(0.005, 0.995, 60), np.ones(60)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--window", default="100,300", help="wall slots a,b")
    parser.add_argument("--cap", type=float, default=1.8)
    parser.add_argument("--start-delay", type=int, default=10)
    args = parser.parse_args(argv)
    a, b = (int(v) for v in args.window.split(","))
    cfg = Config()
    p, host = cfg.layout()
    caps = {h: args.cap for h in range(cfg.hosts)}
    bound = constrained_limit(p, cfg.capacity, limits=Limits.build(p.size, host, caps))
    big_limit = sum(limit(p[host == h], args.cap) for h in range(cfg.big_hosts))
    print(
        f"caps_live's site, its {cfg.big_hosts} big hosts capped at {args.cap:g} polls per "
        f"slot (their limit: {big_limit:.3f} changes per slot), baselines, start delay "
        f"{args.start_delay} slots, wall slots {a}-{b}, {args.seeds} seeds",
        flush=True,
    )
    bayes = [
        simulate("bayes", s, slots=b, window=(a, b), cap=args.cap, start_delay=args.start_delay)
        for s in range(args.seeds)
    ]
    rest = float(np.mean([r.small for r in bayes]))
    print(
        f"bayes in caps_sim: big hosts {np.mean([r.big for r in bayes]):.3f}, the rest {rest:.3f}"
    )
    print()
    print(
        "| learner on the big hosts | prior | big hosts / slot (mean) | lowest "
        "| share of the capped limit with bayes's rest |"
    )
    print("|---|---|---:|---:|---:|")
    rows: list[tuple[str, str]] = [("oracle", "-"), ("in turn", "-")]
    rows += [("posterior", name) for name in priors(p)]
    for policy, prior_name in rows:
        grid, weights = priors(p)[prior_name] if prior_name != "-" else (p, np.ones(p.size))
        got = [
            run(
                policy,
                s,
                grid,
                weights / weights.sum(),
                slots=b,
                window=(a, b),
                cap=args.cap,
                start_delay=args.start_delay,
            )
            for s in range(args.seeds)
        ]
        mean = float(np.mean(got))
        share = (mean + rest) / bound
        print(
            f"| {policy} | {prior_name} | {mean:.3f} | {min(got):.3f} | {share:.3f} |", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
