"""The four kinds of fleet compared: which ordering and start-list rule their foragers use.

- ``weblog``: weblog update (Algorithm 1 of *Selection in Scale-Free Small World*), each
  forager with fixed random ordering weights (a child gets new random ones);
- ``rl``: the TD(0) URL ordering from a fixed start list, children copy the weights;
- ``best_first``: frontier ranked by estimated relevance, fixed start list;
- ``breadth_first``: frontier first in, first out, fixed start list.
"""

from __future__ import annotations

import random

from crawler.discovery._forager import (
    MAX_AGE,
    MAX_STEP,
    MIN_FORAGER,
    Fleet,
    Forager,
    ReinforcingAgent,
)
from crawler.discovery._ordering import (
    BestFirstOrdering,
    BreadthFirstOrdering,
    Ordering,
    ValueOrdering,
    random_weights,
)
from crawler.discovery._weblog import Weblog

STRATEGIES = ("weblog", "rl", "best_first", "breadth_first")


def make_fleet(
    strategy: str,
    seeds: list[str],
    dimensions: int,
    rng: random.Random,
    *,
    max_age: float | None = None,
    max_step: int = MAX_STEP,
    ties: random.Random | None = None,
) -> Fleet:
    """``MIN_FORAGER`` foragers of one kind, all starting from ``seeds``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    age = MAX_AGE if max_age is None else max_age
    foragers = []
    for _ in range(MIN_FORAGER):
        ordering: Ordering
        if strategy in ("weblog", "rl"):
            learning = strategy == "rl"
            ordering = ValueOrdering(random_weights(rng, dimensions), learning=learning)
        elif strategy == "best_first":
            ordering = BestFirstOrdering(dimensions)
        else:
            ordering = BreadthFirstOrdering()
        foragers.append(
            Forager(
                Weblog.from_seeds(seeds, ties=ties),
                ordering,
                update_weblog=strategy == "weblog",
                dimensions=dimensions,
                max_age=age,
                max_step=max_step,
            )
        )
    return Fleet(foragers, ReinforcingAgent(age))
