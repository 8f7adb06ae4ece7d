"""No loss from partitioning: split the cluster's capacity so the global optimum holds.

One scheduler over all URLs with capacity C = sum of the workers' capacities reaches the
Lagrange optimum: every URL's marginal value of one more poll equals one multiplier m
(or the URL is capped at a poll per slot). Cutting the URLs into per-worker schedulers
loses nothing as long as each worker's budget is exactly what its URLs take at that
same m: its own optimum is then the global one restricted to its URLs (the optimality
conditions are per URL plus one shared m). So the coordinator:

1. solves the global allocation x* over all URLs at the total capacity (the existing
   solver, ``crawler.schedulers.optimal_allocation``);
2. weighs each site by sum of x* over its URLs and packs the sites by Best Fit
   Decreasing;
3. gives each worker its sites' weight as budget (``Split.budgets``).

Sites are indivisible, so the weights at the full total may not pack (the workers
would have to be filled exactly); then the coordinator lowers the total it solves for
(bisection) to the largest that packs: the only loss left is that gap, reported as
``Split.packed_total`` against the capacity. A worker may still spend its leftover room
on its own URLs: its local optimum at its full capacity is at least the restricted one,
so the value lies between ``Split.value`` and the global limit (``partition_value``
measures it).

The alternative without known rates (workers learn x with LAKG): each worker reports
its marginal value (its hit rate per poll at equilibrium) and the coordinator moves
budget or sites from the workers whose multiplier is lowest to those where it is
highest until they agree. Designed, not built: docs/cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from crawler.cluster._bfd import Packing, best_fit_decreasing
from crawler.cluster._types import FloatArray, IntArray, capacities_array
from crawler.cluster._weights import site_weights
from crawler.schedulers import expected_hits, limit, optimal_allocation

_BISECT_STEPS = 30


@dataclass(frozen=True)
class Split:
    """The coordinator's plan: where each site goes and each worker's budget."""

    assignment: IntArray
    #: polls per slot each worker spends on its sites at the shared multiplier
    budgets: FloatArray
    #: the total capacity the shared allocation was solved for (<= sum of capacities)
    packed_total: float
    #: the shared allocation, per URL
    x: FloatArray
    #: expected hits per slot of the shared allocation (regular polling)
    value: float
    #: expected hits per slot of one scheduler over all URLs at the full capacity
    limit: float


def _pack_at(
    total: float,
    p: FloatArray,
    sites: IntArray,
    n_sites: int,
    caps: FloatArray,
    importance: FloatArray | None,
) -> tuple[FloatArray, Packing]:
    x = optimal_allocation(p, total, importance)
    return x, best_fit_decreasing(site_weights(x, sites, n_sites), caps)


def shared_multiplier_split(
    p: ArrayLike,
    site_of_url: ArrayLike,
    capacities: ArrayLike,
    importance: ArrayLike | None = None,
    n_sites: int | None = None,
) -> Split:
    """Pack sites at one global multiplier and give every worker its sites' budget.

    ``p``: change probabilities per slot (known or estimated); ``site_of_url``: each
    URL's site index. Raises ValueError when not even a tiny total packs (a single site
    that outweighs every worker at any allocation cannot happen: x > 0 shrinks to 0)."""
    pa = np.asarray(p, dtype=np.float64)
    sites = np.asarray(site_of_url, dtype=np.int64)
    caps = capacities_array(capacities)
    imp = None if importance is None else np.asarray(importance, dtype=np.float64)
    count = int(sites.max()) + 1 if n_sites is None else n_sites
    total = float(caps.sum())
    full = limit(pa, total, imp)
    x, packing = _pack_at(total, pa, sites, count, caps, imp)
    packed_total = total
    if packing.opened:
        lo, hi = 0.0, total
        best: tuple[FloatArray, Packing] | None = None
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            trial = _pack_at(mid, pa, sites, count, caps, imp)
            if trial[1].opened:
                hi = mid
            else:
                lo, best = mid, trial
        if best is None:
            raise ValueError("the sites do not pack onto the workers at any allocation")
        x, packing = best
        packed_total = lo
    budgets = np.bincount(packing.assignment, weights=packing.weights, minlength=caps.size).astype(
        np.float64
    )
    return Split(
        assignment=packing.assignment,
        budgets=budgets,
        packed_total=packed_total,
        x=x,
        value=expected_hits(x, pa, imp),
        limit=full,
    )


def partition_value(
    p: ArrayLike,
    site_of_url: ArrayLike,
    assignment: ArrayLike,
    budgets: ArrayLike,
    importance: ArrayLike | None = None,
) -> float:
    """Expected hits per slot when each worker runs the optimum over its own URLs with
    its own budget (``assignment[site]`` = worker, ``budgets[worker]`` polls per slot)."""
    pa = np.asarray(p, dtype=np.float64)
    sites = np.asarray(site_of_url, dtype=np.int64)
    owner = np.asarray(assignment, dtype=np.int64)[sites]
    caps = np.asarray(budgets, dtype=np.float64)
    imp = None if importance is None else np.asarray(importance, dtype=np.float64)
    total = 0.0
    for worker in range(caps.size):
        mine = owner == worker
        if not mine.any() or caps[worker] <= 0:
            continue
        pw = pa[mine]
        iw = None if imp is None else imp[mine]
        cap = float(min(caps[worker], np.count_nonzero(pw > 0) or 1))
        total += limit(pw, cap, iw)
    return total
