"""Paper 001's comparison on the generated site: weblog update vs RL vs Best-First vs
breadth-first, on the scale-free small-world graph and on its rewired (not small-world) copy.

    PYTHONPATH=. python benchmarks/discovery_compare.py [--days 18] [--runs 3] \
        [--plot docs/discovery_compare.png]

Prints each run as it finishes, then the mean of the runs per graph and strategy next to the
figures of *Selection in Scale-Free Small World* (Table 2, RL vs weblog update).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from crawler.discovery._simulate import STRATEGIES, SimulationResult, simulate
from crawler.testsite._graph import clustering, generate, rewire

PAPER = {  # Table 2 of the paper: (RL, WL)
    "sent_efficiency": (0.248, 0.49),
    "download_efficiency": (0.0045, 0.0046),
    "freshness": (0.70, 0.74),
    "age_hours": (1.79, 1.56),
}
COLUMNS = (
    "downloads",
    "sent",
    "relevant",
    "found_urls",
    "download_efficiency",
    "sent_efficiency",
    "freshness",
    "age_hours",
    "delay_hours",
    "recall",
    "foragers",
)


def _mean(results: list[SimulationResult], column: str) -> float:
    return float(np.mean([float(getattr(r, column)) for r in results]))


def _std(results: list[SimulationResult], column: str) -> float:
    return float(np.std([float(getattr(r, column)) for r in results]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=18.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pages", type=int, default=5_000)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--state-noise", type=float, default=0.6)
    parser.add_argument("--max-step", type=int, default=100)
    parser.add_argument("--no-navigation", action="store_true")
    args = parser.parse_args()
    duration = args.days * 86_400.0
    table: dict[tuple[str, str], list[SimulationResult]] = {}
    for run in range(args.runs):
        site = generate(
            pages=args.pages,
            duration=duration,
            state_noise=args.state_noise,
            navigation=not args.no_navigation,
            seed=100 + run,
        )
        graphs = {"small-world": site, "rewired": rewire(site, seed=200 + run)}
        if run == 0:
            for name, graph in graphs.items():
                print(
                    f"# {name}: {graph.size} pages, {len(graph.new_pages())} new over the run, "
                    f"clustering {clustering(graph):.3f}",
                    flush=True,
                )
        for name, graph in graphs.items():
            for strategy in STRATEGIES:
                started = time.perf_counter()

                def progress(t: float, found: int, strategy: str = strategy) -> None:
                    print(f"  .. {strategy} day {t / 86_400:.0f}: {found} found", file=sys.stderr)

                result = simulate(
                    graph,
                    strategy,
                    duration=duration,
                    seed=run,
                    max_step=args.max_step,
                    progress=progress,
                )
                table.setdefault((name, strategy), []).append(result)
                print(
                    f"run {run} {name:11s} {strategy:13s} relevant {result.relevant:4d} "
                    f"sent {result.sent:5d} sent-eff {result.sent_efficiency:.3f} "
                    f"dl-eff {result.download_efficiency:.4f} fresh {result.freshness:.2f} "
                    f"age {result.age_hours:.2f} h recall {result.recall:.2f} "
                    f"({time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
    print()
    header = f"{'graph':11s} {'strategy':13s} " + " ".join(f"{c[:10]:>10s}" for c in COLUMNS)
    print(header)
    for (name, strategy), results in table.items():
        cells = " ".join(f"{_mean(results, c):10.4g}" for c in COLUMNS)
        print(f"{name:11s} {strategy:13s} {cells}")
    print("\nstandard deviation over the runs:")
    for (name, strategy), results in table.items():
        cells = " ".join(f"{_std(results, c):10.4g}" for c in COLUMNS)
        print(f"{name:11s} {strategy:13s} {cells}")
    print()
    print("paper (Table 2) beside ours on the small-world graph, RL vs weblog update:")
    for column, (rl, wl) in PAPER.items():
        ours_rl = _mean(table[("small-world", "rl")], column)
        ours_wl = _mean(table[("small-world", "weblog")], column)
        print(
            f"  {column:20s} paper RL {rl:7.4g} WL {wl:7.4g} | ours RL {ours_rl:7.4g} "
            f"WL {ours_wl:7.4g}"
        )
    for name in ("small-world", "rewired"):
        rl = _mean(table[(name, "rl")], "relevant")
        wl = _mean(table[(name, "weblog")], "relevant")
        print(
            f"{name}: relevant found RL {rl:.0f} vs WL {wl:.0f} -> "
            f"{'RL' if rl > wl else 'WL'} does better"
        )
    if args.plot is not None:
        _plot(table, args.plot)


def _plot(table: dict[tuple[str, str], list[SimulationResult]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = ("relevant", "sent_efficiency", "freshness", "delay_hours")
    fig, axes = plt.subplots(1, len(measures), figsize=(16, 4))
    names = ("small-world", "rewired")
    width = 0.2
    for ax, measure in zip(axes, measures, strict=True):
        for i, strategy in enumerate(STRATEGIES):
            means = [_mean(table[(n, strategy)], measure) for n in names]
            ax.bar(np.arange(len(names)) + (i - 1.5) * width, means, width, label=strategy)
        ax.set_xticks(np.arange(len(names)), names)
        ax.set_title(measure.replace("_", " "))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
