"""Topical crawling on the generated site: the crawl score of *Focused Crawling using
Asynchronous Cellular Learning Automata* (relevance f/d times HITS hub score) vs Best-First vs
breadth-first, by harvest rate and target recall.

    PYTHONPATH=. python benchmarks/discovery_topical.py [--runs 3] [--budgets 500 1000 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

from crawler.discovery._simulate import FocusedResult, simulate_focused
from crawler.discovery._topical import RANKINGS
from crawler.testsite._graph import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budgets", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--hint-noise", type=float, default=1.0)
    args = parser.parse_args()
    table: dict[tuple[int, str], list[FocusedResult]] = {}
    for run in range(args.runs):
        graph = generate(seed=100 + run)
        targets = int((graph.topical & (graph.created <= 0)).sum())
        print(f"run {run}: {targets} on-topic pages of {int((graph.created <= 0).sum())}")
        for budget in args.budgets:
            for ranking in RANKINGS:
                result = simulate_focused(
                    graph, ranking, budget=budget, hint_noise=args.hint_noise, seed=run
                )
                table.setdefault((budget, ranking), []).append(result)
                print(
                    f"  budget {budget:5d} {ranking:13s} harvest {result.harvest_rate:.3f} "
                    f"recall {result.target_recall:.3f}",
                    flush=True,
                )
    print(f"\n{'budget':>6s} {'ranking':13s} {'harvest':>8s} {'recall':>8s}")
    for (budget, ranking), results in table.items():
        harvest = np.mean([r.harvest_rate for r in results])
        recall = np.mean([r.target_recall for r in results])
        print(f"{budget:6d} {ranking:13s} {harvest:8.3f} {recall:8.3f}")


if __name__ == "__main__":
    main()
