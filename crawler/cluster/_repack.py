"""Incremental re-pack: follow joins, departures and weight drift with the fewest moves.

A moved site costs something real: its new owner loads its URL rows and automaton states,
fetches robots.txt again, and the slot's politeness state starts over. So the re-pack
minimizes the weight moved, not the number of bins:

1. Sites whose worker left, and sites never assigned, must be placed.
2. A live worker whose sites now weigh more than ``fill`` x its capacity keeps the subset
   of them with the largest weight that fits (subset sum, exact up to 32 sites); the rest
   are collected. Keeping the most weight is moving the least: any feasible assignment
   that keeps the other workers' sites where they are moves at least
   load - (best subset that fits) off that worker, and this moves exactly that.
3. Everything to place goes by Best Fit Decreasing into the room the live workers have
   left (up to ``fill`` x capacity). Sites on a worker that is not over its target never
   move.
4. Sites that still do not fit are overflow: the result says how many more workers of
   what capacity are needed; an overflowing site shed by a live worker stays there, any
   other goes to the live worker with the most room (every site always has an owner; the
   overload automaton takes it from there).

``fill`` < 1 keeps headroom against drift and hands a new worker a share: with ``fill``
at the cluster's mean load plus a margin, the fullest workers shed sites onto it
(``balanced_fill``). With ``fill`` = 1 a join moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from crawler.cluster._bfd import Shortfall, best_fit_decreasing
from crawler.cluster._subset import EXACT_MAX, subset_sum
from crawler.cluster._types import BoolArray, FloatArray, IntArray, capacities_array, weights_array

UNASSIGNED = -1


@dataclass(frozen=True)
class Repack:
    """The new assignment and what it cost."""

    assignment: IntArray
    #: sites whose live owner changed
    moved: BoolArray
    moved_weight: float
    #: weight of the sites of departed workers and new sites, placed for the first time
    placed_weight: float
    #: the least weight any re-pack to the same targets must move off live workers
    #: (equals ``moved_weight`` when every overloaded worker had at most 32 sites and
    #: nothing overflowed)
    lower_bound: float
    loads: FloatArray
    overflow: BoolArray
    shortfall: Shortfall | None

    @property
    def moved_sites(self) -> int:
        """Number of sites that changed live owner."""
        return int(self.moved.sum())


def balanced_fill(weights: ArrayLike, capacities: ArrayLike, margin: float = 0.05) -> float:
    """A fill target that spreads load: the cluster's mean load ratio plus ``margin``
    (at most 1)."""
    w = weights_array(weights)
    caps = capacities_array(capacities)
    return float(min(1.0, w.sum() / caps.sum() + margin))


def repack(
    previous: ArrayLike,
    weights: ArrayLike,
    capacities: ArrayLike,
    *,
    alive: ArrayLike | None = None,
    fill: float = 1.0,
    new_capacity: float | None = None,
) -> Repack:
    """Re-pack after a change, moving as little weight as possible (see the module doc).

    ``previous[i]``: site i's worker (an index into ``capacities``) or -1 if new.
    ``capacities``: every worker's capacity, new workers included (at new indices).
    ``alive``: which workers are live (default all); a departed worker's sites are placed
    anew. ``fill``: the share of each capacity to fill, in (0, 1]."""
    prev = np.asarray(previous, dtype=np.int64)
    w = weights_array(weights)
    caps = capacities_array(capacities)
    if prev.shape != w.shape:
        raise ValueError("previous must give one worker (or -1) per site")
    if prev.size and (prev.min() < UNASSIGNED or prev.max() >= caps.size):
        raise ValueError("previous names a worker that has no capacity")
    live = np.ones(caps.size, dtype=np.bool_) if alive is None else np.asarray(alive, bool)
    if live.shape != caps.shape:
        raise ValueError("alive must give one flag per worker")
    if not 0 < fill <= 1:
        raise ValueError("fill must be in (0, 1]")
    if not live.any():
        raise ValueError("no live worker to pack onto")
    target = caps * fill
    owner_live = np.zeros(prev.size, dtype=np.bool_)
    known = prev >= 0
    owner_live[known] = live[prev[known]]
    assignment = np.where(owner_live, prev, UNASSIGNED)
    loads = np.bincount(prev[owner_live], weights=w[owner_live], minlength=caps.size)
    lower_bound = 0.0
    by_worker = np.argsort(assignment, kind="stable")
    bounds = np.searchsorted(assignment[by_worker], np.arange(caps.size + 1))
    for worker in np.flatnonzero(live & (loads > target + 1e-9)).tolist():
        mine = by_worker[bounds[worker] : bounds[worker + 1]]
        keep = subset_sum(w[mine], float(target[worker]))
        shed = mine[~keep]
        assignment[shed] = UNASSIGNED
        loads[worker] -= float(w[shed].sum())
        if mine.size <= EXACT_MAX:
            lower_bound += float(w[shed].sum())
        else:  # greedy: the bound is only what any fit must shed
            lower_bound += max(0.0, float(w[mine].sum()) - float(target[worker]))
    todo = np.flatnonzero(assignment == UNASSIGNED)
    overflow = np.zeros(prev.size, dtype=np.bool_)
    shortfall: Shortfall | None = None
    if todo.size:
        live_ids = np.flatnonzero(live)
        packing = best_fit_decreasing(
            w[todo],
            target[live_ids],
            loads=np.minimum(loads[live_ids], target[live_ids]),
            new_capacity=new_capacity if new_capacity is not None else float(caps[live].max()),
        )
        shortfall = packing.shortfall
        # overflow goes where the most room is left, except that a site shed by a live
        # worker stays there: moving a site that fits nowhere gains nothing
        placed = packing.onto_workers() if packing.opened else packing.assignment
        assignment[todo] = live_ids[placed]
        overflow[todo] = packing.overflow
        stay = overflow & owner_live
        assignment[stay] = prev[stay]
    moved = owner_live & (assignment != prev)
    final_loads = np.bincount(assignment, weights=w, minlength=caps.size).astype(np.float64)
    return Repack(
        assignment=assignment,
        moved=moved,
        moved_weight=float(w[moved].sum()),
        placed_weight=float(w[~owner_live].sum()),
        lower_bound=lower_bound,
        loads=final_loads,
        overflow=overflow,
        shortfall=shortfall,
    )
